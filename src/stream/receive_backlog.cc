// ReceiveBacklog: a queue of byte chunks, read in order.
#include "stream/receive_backlog.h"

#include <algorithm>
#include <atomic>

namespace qpsock::stream {
namespace {

// The bytes every backlog of this process holds or has reserved.
std::atomic<uint64_t> process_bytes{0};

}  // namespace

ReceiveBacklog::~ReceiveBacklog() { process_bytes.fetch_sub(bytes_, std::memory_order_relaxed); }

uint64_t ReceiveBacklog::reserve(uint64_t wanted, uint64_t process_limit) {
  uint64_t held = process_bytes.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t granted = held >= process_limit ? 0 : std::min(wanted, process_limit - held);
    if (granted == 0) return 0;
    if (process_bytes.compare_exchange_weak(held, held + granted, std::memory_order_relaxed))
      return granted;
  }
}

void ReceiveBacklog::give_back(uint64_t reserved) {
  process_bytes.fetch_sub(reserved, std::memory_order_relaxed);
}

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
  process_bytes.fetch_sub(copied, std::memory_order_relaxed);
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
