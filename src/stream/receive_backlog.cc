// ReceiveBacklog: a queue of byte chunks, read in order.
#include "stream/receive_backlog.h"

#include <algorithm>

namespace qpsock::stream {

void ReceiveBacklog::append(std::vector<std::byte> data, uint64_t ring_end) {
  if (data.empty()) return;
  bytes_ += data.size();
  chunks_.push_back({std::move(data), 0, ring_end});
}

size_t ReceiveBacklog::take(IovecCursor& destination, std::optional<uint64_t>& finished_ring_end) {
  size_t copied = 0;
  while (!chunks_.empty() && !destination.done()) {
    Chunk& front = chunks_.front();
    const size_t count = std::min(destination.remaining(), front.data.size() - front.taken);
    destination.scatter(front.data.data() + front.taken, count);
    front.taken += count;
    copied += count;
    if (front.taken < front.data.size()) break;
    finished_ring_end = front.ring_end;
    chunks_.pop_front();
  }
  bytes_ -= copied;
  return copied;
}

size_t ReceiveBacklog::peek(IovecCursor& destination) const {
  size_t copied = 0;
  for (const Chunk& chunk : chunks_) {
    if (destination.done()) break;
    const size_t count = std::min(destination.remaining(), chunk.data.size() - chunk.taken);
    destination.scatter(chunk.data.data() + chunk.taken, count);
    copied += count;
  }
  return copied;
}

}  // namespace qpsock::stream
