#include "upgrade/handshake.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "common/log.h"
#include "config/config_loader.h"
#include "libc/next_symbols.h"
#include "transport/shm/shm_transport.h"
#include "upgrade/socket_identity.h"
#include "upgrade/stream_settings_for_socket.h"

namespace qpsock::upgrade {
namespace {

// The process at the other end of the side channel, if it holds `inode`.
int verified_peer(int side_fd, const Hello& hello, uint64_t inode, pid_t& pid) {
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (next::getsockopt(side_fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return -errno;
  if (hello.magic != kHelloMagic || hello.version != kProtocolVersion) return -EPROTO;
  if (credentials.pid != hello.pid) return -EPERM;
  const int likely_fd = static_cast<int>(hello.socket_fd_hint) - 1;
  if (!process_holds_socket(credentials.pid, inode, likely_fd)) return -EPERM;
  pid = credentials.pid;
  return 0;
}

Hello our_hello(const Connection& connection, int tcp_fd, bool accepted) {
  Hello hello{};
  hello.magic = kHelloMagic;
  hello.version = kProtocolVersion;
  hello.socket_fd_hint = tcp_fd >= 0 ? static_cast<uint32_t>(tcp_fd) + 1 : 0;
  hello.pid = getpid();
  hello.accepted = accepted ? 1 : 0;
  hello.token = connection.expected_token();
  return hello;
}

int exchange_hellos(Connection& connection, int tcp_fd, int side_fd, uint64_t peer_socket_inode,
                    Deadline deadline, Hello& theirs, pid_t& peer_pid) {
  const bool initiator = connection.role() == config::Role::server;
  if (initiator) {
    const Hello ours = our_hello(connection, tcp_fd, true);
    if (int error = send_exactly(side_fd, &ours, sizeof(ours), deadline); error < 0) return error;
  }
  if (int error = receive_exactly(side_fd, &theirs, sizeof(theirs), deadline); error < 0)
    return error;
  if (initiator && theirs.accepted != 1) return -ECONNREFUSED;
  const int verified = verified_peer(side_fd, theirs, peer_socket_inode, peer_pid);
  if (!initiator) {
    const Hello ours = our_hello(connection, tcp_fd, verified == 0);
    if (int error = send_exactly(side_fd, &ours, sizeof(ours), deadline); error < 0) return error;
  }
  return verified;
}

}  // namespace

int find_peer_socket_inode(int tcp_fd, uint64_t& inode) {
  sockaddr_storage local{}, remote{};
  socklen_t length = sizeof(local);
  if (next::getsockname(tcp_fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) return -errno;
  length = sizeof(remote);
  if (next::getpeername(tcp_fd, reinterpret_cast<sockaddr*>(&remote), &length) != 0) return -errno;
  // The peer's socket, seen from the peer: its own address is our peer's.
  return find_tcp_socket_inode(remote, local, inode);
}

void keep_links_as_configured() {
  transport::shm::set_link_idle_time(std::chrono::duration_cast<std::chrono::milliseconds>(
      config::process_config().tunables().link_idle_time));
}

int run_handshake(Connection& connection, KeptFd tcp, int side_fd, uint64_t peer_socket_inode,
                  Deadline deadline) {
  Hello theirs{};
  pid_t peer_pid = 0;
  if (int error = exchange_hellos(connection, tcp.fd, side_fd, peer_socket_inode, deadline, theirs,
                                  peer_pid);
      error < 0)
    return error;

  const bool initiator = connection.role() == config::Role::server;
  // The fd table's record by number: no system call on it.
  const stream::StreamSettings settings = stream_settings_for_socket(tcp.fd);
  keep_links_as_configured();
  transport::shm::ShmOptions options;
  options.ring_size = settings.ring_size;
  options.setup_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  std::unique_ptr<transport::shm::ShmTransport> transport;
  if (int error = transport::shm::ShmTransport::establish(
          side_fd, initiator ? transport::shm::ShmRole::initiator : transport::shm::ShmRole::responder,
          peer_pid, options, transport);
      error < 0)
    return error;

  std::unique_ptr<stream::Stream> stream;
  if (int error = stream::Stream::create(std::move(transport), settings, nullptr, stream);
      error < 0)
    return error;
  const stream::StreamEndpoint ours = stream->local_endpoint();
  stream::StreamEndpoint peer{};
  if (int error = send_exactly(side_fd, &ours, sizeof(ours), deadline); error < 0) return error;
  if (int error = receive_exactly(side_fd, &peer, sizeof(peer), deadline); error < 0) return error;
  if (int error = stream->connect(peer); error < 0) return error;

  // Installed before "ready": once the peer hears it, it may switch, and our
  // reads must then know to look for its switch header.
  connection.install(std::move(stream), theirs.token, tcp, stats::Path::shm);
  const char ready = 'R';
  char peer_ready = 0;
  if (int error = send_exactly(side_fd, &ready, 1, deadline); error < 0) return error;
  if (int error = receive_exactly(side_fd, &peer_ready, 1, deadline); error < 0) return error;
  if (peer_ready != ready) return -EPROTO;
  connection.allow_send_switch();
  return 0;
}

}  // namespace qpsock::upgrade
