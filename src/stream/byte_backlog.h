// Bytes a stream holds in its own memory beyond the rings, so that each end
// gets the room TCP's buffers would give it: the receive backlog (the
// peer's bytes taken out of our ring for an application that is not
// reading, as the kernel's receive queue holds them) and the send backlog
// (our application's bytes the peer's ring has no room for yet, as the
// kernel's send queue holds them). Both are queues of chunks, taken in order.
//
// Not thread-safe: the stream guards the receive backlog with its receive
// lock and the send backlog with its send lock.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "stream/iovec_cursor.h"

namespace qpsock::stream {

class ByteBacklog {
 public:
  ByteBacklog() = default;
  ~ByteBacklog();
  ByteBacklog(const ByteBacklog&) = delete;
  ByteBacklog& operator=(const ByteBacklog&) = delete;

  // How many more bytes this backlog may take now, of `wanted`: all the
  // process's backlogs together stay under `process_limit`, as the
  // kernel's TCP buffers stay under tcp_mem. The bytes are counted as the
  // process's until append() or give_back() says what became of them.
  uint64_t reserve(uint64_t wanted, uint64_t process_limit);
  void give_back(uint64_t reserved);

  uint64_t bytes() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }

  // Appends `data` (reserved before), tagged with `ring_end` (the receive
  // backlog's: what the ring had consumed once these bytes were taken).
  void append(std::vector<std::byte> data, uint64_t ring_end = 0);
  // Appends `count` bytes (reserved before) copied from `source`, which
  // advances past them; small appends share a chunk.
  void append_copy(IovecCursor& source, size_t count);
  // Moves up to destination.remaining() bytes into it, in order. Returns the
  // count; `finished_ring_end` becomes the tag of the last chunk this
  // emptied, if it emptied one.
  size_t take(IovecCursor& destination, std::optional<uint64_t>& finished_ring_end);
  // Copies without taking.
  size_t peek(IovecCursor& destination) const;
  // The bytes at the front as iovecs, at most `vectors.size()` of them,
  // valid until the next change: how many it filled.
  size_t front(std::span<iovec> vectors) const;
  // Drops `count` bytes from the front (sent from front()'s iovecs). With
  // `release_memory` false, emptied chunks stay allocated (no free(): a
  // signal handler may have interrupted malloc) until a later drop.
  void drop(uint64_t count, bool release_memory = true);

 private:
  struct Chunk {
    std::vector<std::byte> data;
    size_t taken = 0;
    uint64_t ring_end = 0;
  };
  std::deque<Chunk> chunks_;
  uint64_t bytes_ = 0;
};

}  // namespace qpsock::stream
