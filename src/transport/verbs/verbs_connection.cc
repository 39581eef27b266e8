#include "transport/verbs/verbs_connection.h"

namespace qpsock::transport::verbs {
namespace {

// Transport retries of a lost packet before the queue pair gives up (the
// most a connect may ask for).
constexpr uint8_t kRetryCount = 7;
// No RNR retries: the engine never sends an immediate without a receive
// waiting for it, so an RNR is a bug that must break the connection, not
// stall it.
constexpr uint8_t kRnrRetryCount = 0;

}  // namespace

stream::StreamSettings VerbsConnection::stream_settings(stream::StreamSettings settings) const {
  // Every transport of ours has the request box: the peer's bit decides.
  if ((peer_capabilities & kHelloRendezvousByWrite) != 0) {
    settings.rendezvous_method = stream::RendezvousMethod::write;
    return settings;
  }
  settings.rendezvous_method = stream::RendezvousMethod::read;
  const bool peer_unreliable = (peer_capabilities & kHelloReadsUnreliable) != 0;
  if (peer_unreliable || (transport != nullptr && transport->reads_unreliable()))
    settings.rendezvous_threshold = stream::kNoRendezvous;
  return settings;
}

ConnectionHello local_hello(const VerbsTransport& transport) {
  const uint16_t reads = transport.reads_unreliable() ? kHelloReadsUnreliable : 0;
  return {transport.local_endpoint(), static_cast<uint16_t>(reads | kHelloRendezvousByWrite)};
}

rdma_conn_param connection_parameters(const void* hello, uint8_t hello_length,
                                      uint8_t initiator_depth, uint8_t responder_resources) {
  rdma_conn_param parameters{};
  parameters.private_data = hello;
  parameters.private_data_len = hello_length;
  parameters.initiator_depth = initiator_depth;
  parameters.responder_resources = responder_resources;
  parameters.retry_count = kRetryCount;
  parameters.rnr_retry_count = kRnrRetryCount;
  return parameters;
}

}  // namespace qpsock::transport::verbs
