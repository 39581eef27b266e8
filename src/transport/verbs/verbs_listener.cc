#include "transport/verbs/verbs_listener.h"

#include <netinet/in.h>
#include <string.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/errno_guard.h"
#include "common/log.h"
#include "transport/verbs/connection_hello.h"
#include "transport/verbs/socket_address.h"
#include "transport/verbs/verbs_library.h"

namespace qpsock::transport::verbs {
namespace {

constexpr int kBacklog = 64;

// The one line (options.failure_log_level) of a failed listen or accept.
int explain_failure(log::Level level, const char* where, const char* step, int error) {
  if (log::enabled(level))
    log::message(level, "verbs listener on %s: %s: %s", where, step, strerrordesc_np(-error));
  return error;
}

}  // namespace

int VerbsListener::listen(const sockaddr_storage& local, const VerbsOptions& options,
                          std::unique_ptr<VerbsListener>& out) {
  ErrnoGuard errno_guard;
  const log::Level level = options.failure_log_level;
  const AddressText where = describe_address(local);
  if (!is_inet_address(local) || !options_valid(options))
    return explain_failure(level, where.c_str(), "bad arguments", -EINVAL);
  EventChannel events;
  if (int error = create_event_channel(events); error < 0)
    return explain_failure(level, where.c_str(), "no rdma_cm (rdma_create_event_channel)", error);
  rdma_cm_id* raw_id = nullptr;
  if (verbs_library().rdma_create_id(events.get(), &raw_id, nullptr, RDMA_PS_TCP) != 0)
    return explain_failure(level, where.c_str(), "rdma_create_id", -errno);
  CmId id(raw_id);
  if (verbs_library().rdma_bind_addr(
          id.get(), reinterpret_cast<sockaddr*>(const_cast<sockaddr_storage*>(&local))) != 0)
    return explain_failure(level, where.c_str(), "rdma_bind_addr", -errno);
  if (verbs_library().rdma_listen(id.get(), kBacklog) != 0)
    return explain_failure(level, where.c_str(), "rdma_listen", -errno);
  out =
      std::make_unique<VerbsListener>(ConstructionKey{}, std::move(events), std::move(id), options);
  return 0;
}

VerbsListener::VerbsListener(ConstructionKey, EventChannel events, CmId id,
                             const VerbsOptions& options)
    : events_(std::move(events)), id_(std::move(id)), options_(options) {}

uint16_t VerbsListener::port() const { return ntohs(verbs_library().rdma_get_src_port(id_.get())); }

int VerbsListener::event_fd() const { return events_->fd; }

int VerbsListener::accept(Deadline deadline, VerbsConnection& out) {
  ErrnoGuard errno_guard;
  const log::Level level = options_.failure_log_level;
  sockaddr_storage local{};
  std::memcpy(&local, rdma_get_local_addr(id_.get()),
              rdma_get_local_addr(id_.get())->sa_family == AF_INET6 ? sizeof(sockaddr_in6)
                                                                    : sizeof(sockaddr_in));
  const AddressText where = describe_address(local);

  // Declared before the id it will carry: destroyed after it.
  EventChannel events;
  CmEvent request;
  if (int error = expect_cm_event(events_.get(), RDMA_CM_EVENT_CONNECT_REQUEST, deadline, request);
      error < 0)
    return explain_failure(level, where.c_str(), "waiting for a connect request", error);
  // Ours from here: destroying it unanswered rejects the request.
  CmId id(request->id);
  ConnectionHello peer_hello;
  const int hello_status = decode_hello(request->param.conn.private_data,
                                        request->param.conn.private_data_len, peer_hello);
  const uint8_t peer_initiator_depth = request->param.conn.initiator_depth;
  const uint8_t peer_responder_resources = request->param.conn.responder_resources;
  // Acknowledged before the id moves: rdma_migrate_id waits for that.
  request.reset();
  if (hello_status < 0) {
    verbs_library().rdma_reject(id.get(), nullptr, 0);
    return explain_failure(level, where.c_str(), "a connect request without a qpsock hello", hello_status);
  }

  if (int error = create_event_channel(events); error < 0)
    return explain_failure(level, where.c_str(), "rdma_create_event_channel", error);
  if (verbs_library().rdma_migrate_id(id.get(), events.get()) != 0)
    return explain_failure(level, where.c_str(), "rdma_migrate_id", -errno);
  std::unique_ptr<VerbsTransport> transport;
  if (int error = VerbsTransport::create(std::move(events), std::move(id), options_, transport);
      error < 0)
    return explain_failure(level, where.c_str(), "setting up the queue pair", error);
  const EncodedHello hello = encode_hello(local_hello(*transport));
  // The lower of what each side asks for and the other serves.
  rdma_conn_param parameters = connection_parameters(
      hello.data(), hello.size(), std::min(transport->reads_asked(), peer_responder_resources),
      std::min(transport->reads_served(), peer_initiator_depth));
  if (verbs_library().rdma_accept(transport->cm_id(), &parameters) != 0)
    return explain_failure(level, where.c_str(), "rdma_accept", -errno);
  CmEvent established;
  if (int error =
          expect_cm_event(transport->cm_events(), RDMA_CM_EVENT_ESTABLISHED, deadline, established);
      error < 0)
    return explain_failure(level, where.c_str(), "establishing the connection", error);
  established.reset();
  if (int error = transport->complete_connection(); error < 0)
    return explain_failure(level, where.c_str(), "the peer serves no RDMA reads", error);
  out = {std::move(transport), peer_hello.endpoint, peer_hello.capabilities};
  return 0;
}

}  // namespace qpsock::transport::verbs
