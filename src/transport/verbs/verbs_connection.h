// What establishing a verbs connection gives its caller (either side): the
// transport, and the peer's StreamEndpoint from its connect or accept private
// data. Then:
//   Stream::create(std::move(connection.transport), settings, ..., stream);
//   stream->connect(connection.peer_endpoint);
// with settings.ring_size equal to the VerbsOptions::ring_size used.
#pragma once

#include <memory>

#include "stream/stream.h"
#include "transport/verbs/connection_hello.h"
#include "transport/verbs/verbs_transport.h"

namespace qpsock::transport::verbs {

struct VerbsConnection {
  std::unique_ptr<VerbsTransport> transport;
  stream::StreamEndpoint peer_endpoint{};
  uint16_t peer_capabilities = 0;  // the peer hello's (kHelloReadsUnreliable, ...)

  // `settings` as streams over this connection must use them: rendezvous by
  // RDMA WRITE when both ends can; otherwise by RDMA READ, or none when
  // either end's reads are unreliable (VerbsTransport::reads_unreliable).
  stream::StreamSettings stream_settings(stream::StreamSettings settings) const;
};

// Our hello: the transport's endpoint and capabilities.
ConnectionHello local_hello(const VerbsTransport& transport);

// The connect/accept parameters both sides send: our hello as private data,
// the reads we ask for and serve, no RNR retries (see verbs_transport.h).
rdma_conn_param connection_parameters(const void* hello, uint8_t hello_length,
                                      uint8_t initiator_depth, uint8_t responder_resources);

}  // namespace qpsock::transport::verbs
