#include "upgrade/socket_upgrade.h"

#include <cerrno>

#include "common/errno_guard.h"
#include "common/log.h"
#include "config/config_loader.h"
#include "libc/next_symbols.h"
#include "upgrade/connection_registry.h"
#include "upgrade/handshake.h"
#include "upgrade/side_channel.h"
#include "upgrade/socket_identity.h"
#include "upgrade/upgrade_agent.h"

namespace qpsock::upgrade {
namespace {

Deadline upgrade_deadline() {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             config::process_config().tunables().upgrade_timeout);
}

bool same_host_allowed() {
  return config::process_config().tunables().same_host == config::SameHost::shm;
}

// The server's side: connect to the client's listener and run the handshake.
void try_server_upgrade(int fd, Connection& connection) {
  uint64_t client_inode = 0;
  int result = find_peer_socket_inode(fd, client_inode);
  if (result < 0) {
    QPSOCK_LOG(info, "fd %d: the peer is not a socket on this host (%d); stays on TCP", fd, result);
    connection.decline("the peer is not on this host");
    return;
  }
  const int side_fd = connect_for_upgrade(client_inode);
  if (side_fd < 0) {
    QPSOCK_LOG(info, "fd %d: the peer does not run qpsock (%d); stays on TCP", fd, side_fd);
    connection.decline("the peer does not run qpsock");
    return;
  }
  result = run_handshake(connection, fd, side_fd, client_inode, upgrade_deadline());
  next::close(side_fd);
  if (result < 0) {
    QPSOCK_LOG(info, "fd %d: upgrade declined (%d); stays on TCP", fd, result);
    connection.decline("the upgrade handshake failed");
    return;
  }
  QPSOCK_LOG(info, "fd %d: upgraded to shared memory", fd);
}

}  // namespace

void offer_client_upgrade(int fd) {
  ErrnoGuard errno_guard;
  if (!same_host_allowed()) return;
  uint64_t inode = 0;
  if (socket_inode_of_fd(fd, inode) < 0) return;
  const int listener = listen_for_upgrade(inode);
  if (listener < 0) {
    QPSOCK_LOG(info, "fd %d: no side-channel listener (%d); stays on TCP", fd, listener);
    return;
  }
  auto connection = std::make_shared<Connection>(config::Role::client);
  attach_connection(fd, connection);
  offer_upgrade(listener, fd, inode, connection, upgrade_deadline());
}

void withdraw_upgrade(int fd) {
  ErrnoGuard errno_guard;
  if (auto connection = detach_connection(fd)) connection->decline("connect failed");
}

void offer_server_upgrade(int fd) {
  ErrnoGuard errno_guard;
  if (!same_host_allowed()) return;
  attach_connection(fd, std::make_shared<Connection>(config::Role::server));
}

std::shared_ptr<Connection> connection_for_io(int fd) {
  if (!any_connections()) return nullptr;
  std::shared_ptr<Connection> connection = find_connection(fd);
  if (connection == nullptr) return nullptr;
  if (connection->role() == config::Role::server && connection->phase() == UpgradePhase::offered) {
    ErrnoGuard errno_guard;
    if (connection->begin_negotiation()) try_server_upgrade(fd, *connection);
  }
  if (connection->phase() == UpgradePhase::declined && connection->stream() == nullptr) {
    // Nothing will ever switch: later calls go straight to the kernel.
    ErrnoGuard errno_guard;
    detach_connection(fd);
    return nullptr;
  }
  return connection;
}

void attach_statistics(int fd, stats::Handle handle) {
  if (handle == 0 || !any_connections()) return;
  if (std::shared_ptr<Connection> connection = find_connection(fd))
    connection->attach_statistics(handle);
}

void connection_closing(int fd) {
  if (!any_connections()) return;
  ErrnoGuard errno_guard;
  std::shared_ptr<Connection> connection = detach_connection(fd);
  if (connection == nullptr || connection_in_use(connection.get())) return;
  if (connection->close_stream()) {
    // Unread data: TCP answers close with a reset, and so do we.
    const linger abortive{1, 0};
    next::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof(abortive));
  }
}

}  // namespace qpsock::upgrade
