// ByteBacklog: a queue of byte chunks, taken in order.
#include "stream/byte_backlog.h"

#include <algorithm>
#include <atomic>

namespace qpsock::stream {
namespace {

// The bytes every backlog of this process holds or has reserved.
std::atomic<uint64_t> process_bytes{0};

// Small appends fill a chunk of this size before the next one starts.
constexpr size_t kSharedChunk = size_t{64} << 10;

}  // namespace

ByteBacklog::~ByteBacklog() { process_bytes.fetch_sub(bytes_, std::memory_order_relaxed); }

uint64_t ByteBacklog::reserve(uint64_t wanted, uint64_t process_limit) {
  uint64_t held = process_bytes.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t granted = held >= process_limit ? 0 : std::min(wanted, process_limit - held);
    if (granted == 0) return 0;
    if (process_bytes.compare_exchange_weak(held, held + granted, std::memory_order_relaxed))
      return granted;
  }
}

void ByteBacklog::give_back(uint64_t reserved) {
  process_bytes.fetch_sub(reserved, std::memory_order_relaxed);
}

void ByteBacklog::append(std::vector<std::byte> data, uint64_t ring_end) {
  if (data.empty()) return;
  bytes_ += data.size();
  chunks_.push_back({std::move(data), 0, ring_end});
}

void ByteBacklog::append_copy(IovecCursor& source, size_t count) {
  bytes_ += count;
  while (count > 0) {
    // A chunk is never reallocated: front()'s iovecs point into it.
    if (chunks_.empty() || chunks_.back().data.size() >= kSharedChunk ||
        chunks_.back().data.size() == chunks_.back().data.capacity()) {
      chunks_.push_back({});
      chunks_.back().data.reserve(std::max(count, kSharedChunk));
    }
    std::vector<std::byte>& last = chunks_.back().data;
    const size_t piece = std::min(count, last.capacity() - last.size());
    const size_t at = last.size();
    last.resize(at + piece);
    source.gather(last.data() + at, piece);
    count -= piece;
  }
}

size_t ByteBacklog::take(IovecCursor& destination, std::optional<uint64_t>& finished_ring_end) {
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

size_t ByteBacklog::peek(IovecCursor& destination) const {
  size_t copied = 0;
  for (const Chunk& chunk : chunks_) {
    if (destination.done()) break;
    const size_t count = std::min(destination.remaining(), chunk.data.size() - chunk.taken);
    destination.scatter(chunk.data.data() + chunk.taken, count);
    copied += count;
  }
  return copied;
}

size_t ByteBacklog::front(std::span<iovec> vectors) const {
  size_t filled = 0;
  for (const Chunk& chunk : chunks_) {
    if (filled == vectors.size()) break;
    if (chunk.taken == chunk.data.size()) continue;
    vectors[filled++] = {const_cast<std::byte*>(chunk.data.data()) + chunk.taken,
                         chunk.data.size() - chunk.taken};
  }
  return filled;
}

void ByteBacklog::drop(uint64_t count, bool release_memory) {
  count = std::min(count, bytes_);
  bytes_ -= count;
  process_bytes.fetch_sub(count, std::memory_order_relaxed);
  for (size_t index = 0; count > 0; ++index) {
    Chunk& chunk = chunks_[index];
    const size_t piece = std::min<uint64_t>(count, chunk.data.size() - chunk.taken);
    chunk.taken += piece;
    count -= piece;
  }
  if (!release_memory) return;
  while (!chunks_.empty() && chunks_.front().taken == chunks_.front().data.size()) chunks_.pop_front();
}

}  // namespace qpsock::stream
