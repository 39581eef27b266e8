// A position in an application's iovec array, for code that consumes it in
// pieces (records, reads) without copying the array.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <span>

namespace qpsock::stream {

struct ByteRange {
  std::byte* data;
  size_t length;
};

class IovecCursor {
 public:
  explicit IovecCursor(std::span<const iovec> vectors);

  size_t remaining() const { return remaining_; }
  bool done() const { return remaining_ == 0; }
  // The rest of the current iovec (empty when done).
  ByteRange contiguous() const;
  void advance(size_t count);

  // Copies `count` bytes out of the iovecs into `destination` and advances.
  void gather(std::byte* destination, size_t count);
  // Copies `count` bytes from `source` into the iovecs and advances.
  void scatter(const std::byte* source, size_t count);

  static size_t total_length(std::span<const iovec> vectors);

 private:
  // Moves past empty iovecs and a used-up current one: the constructor and
  // every step of advance() leave the cursor so.
  void skip_empty();

  std::span<const iovec> vectors_;
  size_t index_ = 0;
  size_t offset_ = 0;
  size_t remaining_ = 0;
};

}  // namespace qpsock::stream
