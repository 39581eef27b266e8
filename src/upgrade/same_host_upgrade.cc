#include "upgrade/same_host_upgrade.h"

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "common/log.h"
#include "common/own_descriptor.h"
#include "config/config_loader.h"
#include "libc/next_symbols.h"
#include "upgrade/forked_children.h"
#include "upgrade/handshake.h"
#include "upgrade/link_upgrade.h"
#include "upgrade/socket_identity.h"

namespace qpsock::upgrade {
namespace {

using Clock = std::chrono::steady_clock;

// The handshake over `side_fd`, connected to the client's listener, once
// the attempt has begun (the phase is negotiating). Closes side_fd.
void negotiate(Connection& connection, KeptFd tcp, int side_fd, uint64_t client_inode,
               Deadline deadline) {
  const int result = run_handshake(connection, tcp, side_fd, client_inode, deadline);
  close_descriptor(side_fd);
  if (result < 0) {
    QPSOCK_LOG(info, "fd %d: upgrade declined (%d); stays on TCP", tcp.fd, result);
    connection.decline("the upgrade handshake failed");
    return;
  }
  QPSOCK_LOG(info, "fd %d: upgraded to shared memory", tcp.fd);
}

// The attempt itself, once begun: over a link with the client's process if
// one offers the socket, else the client's listener and the handshake over it.
void attempt(Connection& connection, KeptFd tcp, uint64_t client_inode, Deadline deadline) {
  if (attempt_over_link(connection, tcp, client_inode, deadline)) return;
  const int side_fd = own_descriptors_recently_refused() ? -EMFILE : connect_for_upgrade(client_inode);
  if (is_descriptor_limit(side_fd)) {
    QPSOCK_LOG(info, "fd %d: no descriptor for the side channel (%d); stays on TCP", tcp.fd, side_fd);
    connection.decline("no descriptor for the upgrade (RLIMIT_NOFILE)");
    return;
  }
  if (side_fd < 0) {
    QPSOCK_LOG(info, "fd %d: the peer offers no upgrade (%d); stays on TCP", tcp.fd, side_fd);
    connection.decline("the peer offers no upgrade (no qpsock, or it declined)");
    return;
  }
  negotiate(connection, tcp, side_fd, client_inode, deadline);
}

// The checks a worker's attempt makes before it begins: false if the
// process forked meanwhile (then declined) or the attempt is not offered.
bool begin_in_worker(Connection& connection, const KeptFd& tcp, uint64_t tcp_socket_inode) {
  return !declined_for_a_fork_since_claimed(connection, tcp.fd) &&
         !declined_for_a_forked_child(connection, tcp.fd, tcp_socket_inode) &&
         connection.begin_negotiation() &&  // false if declined meanwhile (passed to another process)
         !declined_for_a_fork_since_claimed(connection, tcp.fd) &&
         !declined_for_a_forked_child(connection, tcp.fd, tcp_socket_inode);
}

}  // namespace

std::chrono::steady_clock::duration shm_upgrade_delay() {
  return std::chrono::duration_cast<Clock::duration>(
      config::process_config().tunables().shm_upgrade_delay);
}

uint64_t shm_upgrade_bytes() { return config::process_config().tunables().shm_upgrade_bytes; }

int open_same_host_listener(uint64_t tcp_socket_inode, ClientListeners& listeners,
                            const char*& reason) {
  listeners.same_host_fd = listen_for_upgrade(tcp_socket_inode);
  if (listeners.same_host_fd < 0) reason = "no side-channel listener";
  return std::min(listeners.same_host_fd, 0);
}

void attempt_same_host_upgrade_now(int tcp_fd, Connection& connection, uint64_t client_inode,
                                   Deadline deadline) {
  // The application's own call on tcp_fd: the number is the socket now.
  if (connection.begin_negotiation() && !declined_for_a_fork_since_claimed(connection, tcp_fd))
    attempt(connection, keep_fd(tcp_fd), client_inode, deadline);
}

void attempt_same_host_upgrade_in_worker(Connection& connection, KeptFd tcp,
                                         uint64_t tcp_socket_inode, uint64_t client_inode,
                                         Deadline deadline) {
  if (begin_in_worker(connection, tcp, tcp_socket_inode)) attempt(connection, tcp, client_inode, deadline);
}

void attempt_same_host_upgrade_early(Connection& connection, KeptFd tcp, uint64_t tcp_socket_inode,
                                     uint64_t client_inode, Deadline deadline) {
  // An offer on a link, or else the listener, first: a client that has
  // not made either yet (or has no qpsock) leaves the connection offered,
  // for a later try.
  if (offered_on_a_link(client_inode)) {
    if (begin_in_worker(connection, tcp, tcp_socket_inode)) attempt(connection, tcp, client_inode, deadline);
    return;
  }
  const int side_fd = connect_for_upgrade(client_inode);
  if (side_fd < 0) return;
  if (!begin_in_worker(connection, tcp, tcp_socket_inode)) {
    // The client's agent sees the side channel close, and its offer ends.
    close_descriptor(side_fd);
    return;
  }
  negotiate(connection, tcp, side_fd, client_inode, deadline);
}

}  // namespace qpsock::upgrade
