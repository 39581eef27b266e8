// Bytes taken out of our receive ring for an application that is not
// reading, so that its peer gets the room TCP's buffers would give it (the
// kernel's receive queue holds what a socket has not read; our ring alone
// holds less). The stream fills it when the peer rings the doorbell for
// room, and every read, peek and FIONREAD sees its bytes first, in order.
//
// Not thread-safe: the stream guards it with its receive lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "stream/iovec_cursor.h"

namespace qpsock::stream {

class ReceiveBacklog {
 public:
  ReceiveBacklog() = default;
  ~ReceiveBacklog();
  ReceiveBacklog(const ReceiveBacklog&) = delete;
  ReceiveBacklog& operator=(const ReceiveBacklog&) = delete;

  // How many more bytes this backlog may take now, of `wanted`: all the
  // process's backlogs together stay under `process_limit`, as the
  // kernel's TCP buffers stay under tcp_mem. The bytes are counted as the
  // process's until append() or give_back() says what became of them.
  uint64_t reserve(uint64_t wanted, uint64_t process_limit);
  void give_back(uint64_t reserved);

  uint64_t bytes() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }

  // Appends `data` (reserved before), the payload of ring records that end at ring offset
  // `ring_end` (what the ring had consumed once they were taken).
  void append(std::vector<std::byte> data, uint64_t ring_end);
  // Moves up to destination.remaining() bytes into it, in order. Returns the
  // count; `finished_ring_end` becomes the ring end of the last chunk this
  // emptied, if it emptied one (the ring bytes the application has now read).
  size_t take(IovecCursor& destination, std::optional<uint64_t>& finished_ring_end);
  // Copies without taking.
  size_t peek(IovecCursor& destination) const;

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
