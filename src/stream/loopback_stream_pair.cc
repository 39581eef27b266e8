#include "stream/loopback_stream_pair.h"

namespace qpsock::stream {

int connect_streams(Stream& first, Stream& second) {
  if (int error = first.connect(second.local_endpoint()); error < 0) return error;
  return second.connect(first.local_endpoint());
}

int make_loopback_stream_pair(const LoopbackOptions& options, const StreamSettings& first_settings,
                              const StreamSettings& second_settings, LoopbackStreamPair& pair) {
  std::unique_ptr<LoopbackTransport> first_transport;
  std::unique_ptr<LoopbackTransport> second_transport;
  if (int error = LoopbackTransport::make_pair(options, first_transport, second_transport); error < 0)
    return error;
  LoopbackStreamPair made;
  made.first_transport = first_transport.get();
  made.second_transport = second_transport.get();
  if (int error = Stream::create(std::move(first_transport), first_settings, nullptr, made.first);
      error < 0)
    return error;
  if (int error = Stream::create(std::move(second_transport), second_settings, nullptr, made.second);
      error < 0)
    return error;
  if (int error = connect_streams(*made.first, *made.second); error < 0) return error;
  pair = std::move(made);
  return 0;
}

}  // namespace qpsock::stream
