// Helpers for tests that run a Stream over the shm transport between two
// processes (header-only): a Stream connected to the process at the other end
// of a socketpair. The process and transfer helpers are support/process_pair.h.
#pragma once

#include <memory>

#include "stream/stream.h"
#include "support/process_pair.h"
#include "transport/shm/shm_transport.h"
#include "unit/shm_test_support.h"

namespace qpsock::transport::shm::testing {

using stream::testing::ChildProcess;
using stream::testing::PieceSizes;
using stream::testing::process_volume;
using stream::testing::read_pattern;
using stream::testing::receive_all;
using stream::testing::rendezvous;
using stream::testing::send_all;
using stream::testing::transfer_both_ways;
using stream::testing::TransferPlan;
using stream::testing::write_pattern;

// A Stream over shm to the process at the other end of `socket`: establish,
// create, then trade endpoints on the socket (as the upgrade layer does).
inline int connect_shm_stream(int socket, ShmRole role, pid_t peer,
                              const stream::StreamSettings& settings,
                              std::unique_ptr<stream::Stream>& stream) {
  ShmOptions options;
  options.ring_size = settings.ring_size;
  std::unique_ptr<ShmTransport> transport;
  if (int error = ShmTransport::establish(socket, role, peer, options, transport); error < 0)
    return error;
  if (int error = stream::Stream::create(std::move(transport), settings, nullptr, stream);
      error < 0)
    return error;
  const stream::StreamEndpoint ours = stream->local_endpoint();
  stream::StreamEndpoint theirs{};
  if (!send_all(socket, &ours, sizeof(ours)) || !receive_all(socket, &theirs, sizeof(theirs)))
    return -EPROTO;
  return stream->connect(theirs);
}

}  // namespace qpsock::transport::shm::testing
