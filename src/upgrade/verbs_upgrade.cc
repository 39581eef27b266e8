#include "upgrade/verbs_upgrade.h"

#include <string.h>

#include <cerrno>
#include <cstdio>

#include "common/log.h"
#include "config/config_loader.h"
#include "libc/next_symbols.h"
#include "stream/stream.h"
#include "transport/verbs/socket_address.h"
#include "transport/verbs/verbs_connector.h"
#include "upgrade/connection_registry.h"
#include "upgrade/forked_children.h"
#include "upgrade/rdma_readiness.h"
#include "upgrade/socket_identity.h"
#include "upgrade/stream_settings_for_socket.h"
#include "upgrade/upgrade_worker.h"
#include "upgrade/verbs_addresses.h"

namespace qpsock::upgrade {
namespace {

using transport::verbs::describe_address;
using transport::verbs::VerbsConnection;
using transport::verbs::VerbsConnector;
using transport::verbs::VerbsListener;
using transport::verbs::VerbsOptions;

VerbsOptions options_for(const stream::StreamSettings& settings) {
  VerbsOptions options;
  // The transport maps the ring the Stream then takes over: the same size.
  options.ring_size = settings.ring_size;
  if (const auto inline_size = config::process_config().tunables().inline_size)
    options.max_inline = *inline_size;
  // A failure here only means "stay on TCP": the upgrade logs that line itself.
  options.failure_log_level = log::Level::debug;
  return options;
}

// Why an attempt failed, for qpsock-stat (a string literal).
const char* decline_reason(int error) {
  switch (-error) {
    case ECONNREFUSED:
      return "the peer offers no upgrade (no qpsock, or it declined)";
    case ETIMEDOUT:
      return "the RDMA upgrade timed out";
    case ENODEV:
    case EADDRNOTAVAIL:
    case ENETUNREACH:
    case EHOSTUNREACH:
      return "no RDMA device serves the connection's addresses";
    case ENOMEM:
    case EPERM:
      return "cannot pin memory for RDMA (RLIMIT_MEMLOCK?)";
    case ENOTCONN:
      return "the socket was closed during the upgrade";
    default:
      return "the RDMA upgrade failed";
  }
}

// The device's name, copied: the transport moves into the stream.
struct DeviceName {
  char text[64];
};
DeviceName device_of(const VerbsConnection& verbs) {
  DeviceName name{};
  snprintf(name.text, sizeof(name.text), "%s", verbs.transport->device_name());
  return name;
}

// Both roles, once the queue pair is connected: the Stream over it, installed.
int start_stream(Connection& connection, KeptFd tcp, VerbsConnection verbs,
                 stream::StreamSettings settings) {
  const int tcp_fd = tcp.fd;  // for the log
  settings = verbs.stream_settings(settings);
  if (settings.rendezvous_threshold == stream::kNoRendezvous)
    QPSOCK_LOG(debug, "fd %d: Soft-RoCE at one end: large writes are copied, not pulled by RDMA reads",
               tcp_fd);
  else
    QPSOCK_LOG(debug, "fd %d: large writes go by rendezvous, %s", tcp_fd,
               settings.rendezvous_method == stream::RendezvousMethod::write
                   ? "written by the sender (RDMA WRITE)"
                   : "pulled by the receiver (RDMA READ)");
  std::unique_ptr<stream::Stream> stream;
  if (int error = stream::Stream::create(std::move(verbs.transport), settings, nullptr, stream);
      error < 0)
    return error;
  if (int error = stream->connect(verbs.peer_endpoint); error < 0) return error;
  return connection.install_announced(std::move(stream), tcp, stats::Path::rdma);
}

void connect_in_worker(int tcp_fd, uint64_t tcp_socket_inode, const std::weak_ptr<Connection>& weak,
                       const sockaddr_storage& local, const sockaddr_storage& peer,
                       const stream::StreamSettings& settings, Deadline deadline) {
  {
    // Closed within rdma_upgrade_delay: nothing was asked of the fabric.
    std::shared_ptr<Connection> connection = weak.lock();
    if (connection == nullptr || declined_for_a_fork_since_claimed(*connection, tcp_fd) ||
        declined_for_a_forked_child(*connection, tcp_fd, tcp_socket_inode) ||
        !connection->begin_negotiation() ||  // declined meanwhile (passed to another process)
        declined_for_a_fork_since_claimed(*connection, tcp_fd) ||
        declined_for_a_forked_child(*connection, tcp_fd, tcp_socket_inode))
      return;
  }
  // Everything the setup pins is reserved first: attempts running at once
  // never each pin a part and all fail (transport/verbs/pin_budget.h).
  transport::verbs::PinningScope pinning(pinned_bytes_per_connection(settings.ring_size));
  VerbsConnection verbs;
  int result = VerbsConnector(options_for(settings)).connect(local, peer, deadline, verbs);
  KeptFd tcp;
  std::shared_ptr<Connection> connection = weak.lock();
  if (connection == nullptr) return;  // closed meanwhile; the queue pair goes with `verbs`
  DeviceName device{};
  if (result == 0) {
    device = device_of(verbs);
    // The application may have renumbered the socket meanwhile.
    tcp = kept_socket_fd(*connection, tcp_fd, tcp_socket_inode);
    if (tcp.empty()) result = -ENOTCONN;
    else tcp_fd = tcp.fd;
  }
  if (result == 0) result = start_stream(*connection, tcp, std::move(verbs), settings);
  if (result < 0) {
    QPSOCK_LOG(info, "fd %d: no RDMA upgrade with %s (%s); stays on TCP", tcp_fd,
               describe_address(peer).c_str(), strerrordesc_np(-result));
    report_pinning_failure(result, settings.ring_size);
    connection->decline(decline_reason(result));
    return;
  }
  QPSOCK_LOG(info, "fd %d: upgraded to RDMA (%s, to %s)", tcp_fd, device.text,
             describe_address(peer).c_str());
}

// The listener's options, sized for the socket's stream; -ENODEV with
// `reason` if RDMA cannot carry it.
int plan_listener_options(int tcp_fd, RdmaListenerPlan& plan, const char*& reason) {
  const stream::StreamSettings settings = stream_settings_for_socket(tcp_fd);
  if ((reason = reason_rdma_unusable(settings.ring_size)) != nullptr) return -ENODEV;
  plan.options = options_for(settings);
  return 0;
}

}  // namespace

int prepare_verbs_offer(int tcp_fd, const sockaddr* destination, socklen_t length,
                        RdmaListenerPlan& plan, const char*& reason) {
  if (int error = plan_listener_options(tcp_fd, plan, reason); error < 0) return error;
  if (int error = client_meeting_address(tcp_fd, destination, length, plan.meeting); error < 0) {
    reason = "the source port is not known before connect";
    return error;
  }
  return 0;
}

int prepare_planned_verbs_offer(int tcp_fd, RdmaListenerPlan& plan, const char*& reason) {
  if (int error = plan_listener_options(tcp_fd, plan, reason); error < 0) return error;
  if (int error = connected_meeting_address(tcp_fd, plan.meeting); error < 0) {
    reason = "the socket's address could not be read";
    return error;
  }
  return 0;
}

int open_verbs_listener(int tcp_fd, const RdmaListenerPlan& plan,
                        std::unique_ptr<VerbsListener>& listener, const char*& reason) {
  if (int error = VerbsListener::listen(plan.meeting, plan.options, listener); error < 0) {
    reason = error == -EADDRINUSE ? "the rdma_cm port of the connection is taken"
                                  : "no RDMA device serves the connection's address";
    return error;
  }
  QPSOCK_LOG(debug, "fd %d: RDMA upgrade offered at %s", tcp_fd,
             describe_address(plan.meeting).c_str());
  return 0;
}

int accept_verbs_upgrade(VerbsListener& listener, Connection& connection, int tcp_fd,
                         uint64_t tcp_socket_inode, Deadline deadline) {
  // As in connect_in_worker: a refused reservation rejects the peer's request.
  transport::verbs::PinningScope pinning(pinned_bytes_per_connection(listener.options().ring_size));
  VerbsConnection verbs;
  int result = listener.accept(deadline, verbs);
  DeviceName device{};
  sockaddr_storage tcp_peer{};
  KeptFd tcp;
  if (result == 0) {
    device = device_of(verbs);
    // Under the number the application holds the socket by now. A connection
    // that ended on TCP while the upgrade came (all its bytes moved before
    // it) has no peer, and nothing left to upgrade.
    result = read_socket(connection, tcp_fd, tcp_socket_inode, [&tcp_peer](int fd) {
      socklen_t length = sizeof(tcp_peer);
      auto* address = reinterpret_cast<sockaddr*>(&tcp_peer);
      return next::getpeername(fd, address, &length) == 0 ? 0 : -errno;
    }, tcp);
    if (result == 0) tcp_fd = tcp.fd;
    if (result == -ENOTCONN)
      QPSOCK_LOG(debug, "fd %d: the TCP connection was closed or ended before its RDMA upgrade",
                 tcp_fd);
  }
  // Only the host at the other end of the TCP connection may take it (the
  // binding tokens then prove it is the very socket; docs/upgrade-protocol.md).
  if (result == 0 && !is_tcp_peer_address(tcp_peer, rdma_get_peer_addr(verbs.transport->cm_id()))) {
    QPSOCK_LOG(warn, "fd %d: an RDMA upgrade request from %s, not the connection's peer; refused",
               tcp_fd, describe_address(*reinterpret_cast<const sockaddr_storage*>(
                           rdma_get_peer_addr(verbs.transport->cm_id()))).c_str());
    result = -EACCES;
  }
  if (result == 0) {
    stream::StreamSettings settings = stream_settings_for_socket(tcp.fd);
    // The listener mapped rings of the size chosen at connect(); SO_RCVBUF
    // may have changed since.
    settings.ring_size = listener.options().ring_size;
    result = start_stream(connection, tcp, std::move(verbs), settings);
  }
  if (result < 0) {
    if (result != -ENOTCONN)
      QPSOCK_LOG(info, "fd %d: RDMA upgrade failed (%s); stays on TCP", tcp_fd,
                 strerrordesc_np(-result));
    report_pinning_failure(result, listener.options().ring_size);
    return result;
  }
  QPSOCK_LOG(info, "fd %d: upgraded to RDMA (%s)", tcp_fd, device.text);
  return 0;
}

void begin_server_verbs_upgrade(int tcp_fd, const std::shared_ptr<Connection>& connection,
                                Deadline deadline) {
  sockaddr_storage local{}, peer{};
  uint64_t inode = 0;
  if (server_meeting_addresses(tcp_fd, local, peer) < 0 || socket_inode_of_fd(tcp_fd, inode) < 0) {
    connection->decline("the socket's addresses could not be read");
    return;
  }
  queue_server_verbs_upgrade(tcp_fd, inode, local, peer, connection, deadline,
                             std::chrono::steady_clock::now() + rdma_upgrade_delay());
}

void queue_server_verbs_upgrade(int tcp_fd, uint64_t tcp_socket_inode, const sockaddr_storage& local,
                                const sockaddr_storage& peer,
                                const std::shared_ptr<Connection>& connection, Deadline deadline,
                                std::chrono::steady_clock::time_point not_before) {
  const stream::StreamSettings settings = stream_settings_for_socket(tcp_fd);
  if (const char* reason = reason_rdma_unusable(settings.ring_size)) {
    QPSOCK_LOG(info, "fd %d: %s; stays on TCP", tcp_fd, reason);
    connection->decline(reason);
    return;
  }
  std::weak_ptr<Connection> weak = connection;
  WorkerJob job;
  job.run = [tcp_fd, tcp_socket_inode, weak, local, peer, settings, deadline] {
    connect_in_worker(tcp_fd, tcp_socket_inode, weak, local, peer, settings, deadline);
  };
  job.not_before = not_before;
  job.owner = weak;
  if (!run_in_upgrade_worker(std::move(job)))
    connection->decline("the upgrade worker could not start");
}

std::chrono::steady_clock::duration rdma_upgrade_delay() {
  // The client's listener waits upgrade_timeout from its connect; the
  // configuration keeps the delay shorter.
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      config::process_config().tunables().rdma_upgrade_delay);
}

}  // namespace qpsock::upgrade
