// Two connected Streams over a pair of LoopbackTransports: the whole engine in
// one process, for tests (of the engine and of the layers above it).
#pragma once

#include <memory>

#include "stream/loopback_transport.h"
#include "stream/stream.h"

namespace qpsock::stream {

struct LoopbackStreamPair {
  std::unique_ptr<Stream> first;
  std::unique_ptr<Stream> second;
  // Owned by the streams; for fault injection.
  LoopbackTransport* first_transport = nullptr;
  LoopbackTransport* second_transport = nullptr;
};

// 0 or -errno.
int make_loopback_stream_pair(const LoopbackOptions& options, const StreamSettings& first_settings,
                              const StreamSettings& second_settings, LoopbackStreamPair& pair);

// Connects two streams made over connected transports (exchanges endpoints).
int connect_streams(Stream& first, Stream& second);

}  // namespace qpsock::stream
