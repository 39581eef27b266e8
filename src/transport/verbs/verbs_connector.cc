#include "transport/verbs/verbs_connector.h"

#include <string.h>

#include <cerrno>
#include <chrono>

#include "common/errno_guard.h"
#include "common/log.h"
#include "transport/verbs/connection_hello.h"
#include "transport/verbs/socket_address.h"
#include "transport/verbs/verbs_library.h"

namespace qpsock::transport::verbs {
namespace {

// The one line (options.failure_log_level) of a failed connect.
int explain_failure(log::Level level, const sockaddr_storage& peer, const char* step, int error,
                    const CmEvent& event = nullptr) {
  if (!log::enabled(level)) return error;
  if (event != nullptr && event->event == RDMA_CM_EVENT_REJECTED)
    log::message(level, "verbs connection to %s unavailable: %s: rejected (CM reason %d)",
                 describe_address(peer).c_str(), step, event->status);
  else
    log::message(level, "verbs connection to %s unavailable: %s: %s",
                 describe_address(peer).c_str(), step, strerrordesc_np(-error));
  return error;
}

int64_t milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start)
      .count();
}

bool families_match(const sockaddr_storage& local, const sockaddr_storage& peer) {
  return is_inet_address(peer) &&
         (local.ss_family == AF_UNSPEC || local.ss_family == peer.ss_family);
}

}  // namespace

int VerbsConnector::connect(const sockaddr_storage& local, const sockaddr_storage& peer,
                            Deadline deadline, VerbsConnection& out) const {
  ErrnoGuard errno_guard;
  const log::Level level = options_.failure_log_level;
  const auto started = std::chrono::steady_clock::now();
  if (!options_valid(options_) || !families_match(local, peer))
    return explain_failure(level, peer, "bad arguments", -EINVAL);
  EventChannel events;
  if (int error = create_event_channel(events); error < 0)
    return explain_failure(level, peer, "no rdma_cm (rdma_create_event_channel)", error);
  rdma_cm_id* raw_id = nullptr;
  if (verbs_library().rdma_create_id(events.get(), &raw_id, nullptr, RDMA_PS_TCP) != 0)
    return explain_failure(level, peer, "rdma_create_id", -errno);
  CmId id(raw_id);
  std::unique_ptr<VerbsTransport> transport;
  // Declared after what it may belong to: acknowledged before the id is
  // destroyed, which waits for every event of the id to be acknowledged.
  CmEvent event;

  // The address, then the route: each names the device that serves them.
  auto* source = local.ss_family == AF_UNSPEC
                     ? nullptr
                     : reinterpret_cast<sockaddr*>(const_cast<sockaddr_storage*>(&local));
  auto* destination = reinterpret_cast<sockaddr*>(const_cast<sockaddr_storage*>(&peer));
  int wait = milliseconds_until(deadline);
  if (wait == 0) return explain_failure(level, peer, "resolving the address", -ETIMEDOUT);
  if (verbs_library().rdma_resolve_addr(id.get(), source, destination, wait) != 0)
    return explain_failure(level, peer, "rdma_resolve_addr", -errno);
  if (int error = expect_cm_event(events.get(), RDMA_CM_EVENT_ADDR_RESOLVED, deadline, event);
      error < 0)
    return explain_failure(level, peer, "resolving the address", error, event);
  event.reset();
  QPSOCK_LOG(debug, "verbs: %s resolved to %s in %lld ms", describe_address(peer).c_str(),
             verbs_library().ibv_get_device_name(id->verbs->device),
             static_cast<long long>(milliseconds_since(started)));
  wait = milliseconds_until(deadline);
  if (wait == 0) return explain_failure(level, peer, "resolving the route", -ETIMEDOUT);
  if (verbs_library().rdma_resolve_route(id.get(), wait) != 0)
    return explain_failure(level, peer, "rdma_resolve_route", -errno);
  if (int error = expect_cm_event(events.get(), RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, event);
      error < 0)
    return explain_failure(level, peer, "resolving the route", error, event);
  event.reset();

  if (int error = VerbsTransport::create(std::move(events), std::move(id), options_, transport);
      error < 0)
    return explain_failure(level, peer, "setting up the queue pair", error);
  const EncodedHello hello = encode_hello(local_hello(*transport));
  rdma_conn_param parameters = connection_parameters(
      hello.data(), hello.size(), transport->reads_asked(), transport->reads_served());
  if (verbs_library().rdma_connect(transport->cm_id(), &parameters) != 0)
    return explain_failure(level, peer, "rdma_connect", -errno);
  if (int error =
          expect_cm_event(transport->cm_events(), RDMA_CM_EVENT_ESTABLISHED, deadline, event);
      error < 0)
    return explain_failure(level, peer, "connecting", error, event);
  ConnectionHello peer_hello;
  if (int error = decode_hello(event->param.conn.private_data, event->param.conn.private_data_len,
                               peer_hello);
      error < 0)
    return explain_failure(level, peer, "the peer's accept", error);
  event.reset();
  if (int error = transport->complete_connection(); error < 0)
    return explain_failure(level, peer, "the peer serves no RDMA reads", error);
  QPSOCK_LOG(debug, "verbs: connected to %s in %lld ms", describe_address(peer).c_str(),
             static_cast<long long>(milliseconds_since(started)));
  out = {std::move(transport), peer_hello.endpoint, peer_hello.capabilities};
  return 0;
}

}  // namespace qpsock::transport::verbs
