#include "stream/iovec_cursor.h"

#include <algorithm>
#include <cstring>

namespace qpsock::stream {

IovecCursor::IovecCursor(std::span<const iovec> vectors)
    : vectors_(vectors), remaining_(total_length(vectors)) {
  skip_empty();
}

size_t IovecCursor::total_length(std::span<const iovec> vectors) {
  size_t total = 0;
  for (const iovec& vector : vectors) total += vector.iov_len;
  return total;
}

ByteRange IovecCursor::contiguous() const {
  if (done()) return {nullptr, 0};
  const iovec& vector = vectors_[index_];
  return {static_cast<std::byte*>(vector.iov_base) + offset_, vector.iov_len - offset_};
}

void IovecCursor::advance(size_t count) {
  count = std::min(count, remaining_);
  remaining_ -= count;
  while (count > 0) {
    const size_t step = std::min(count, vectors_[index_].iov_len - offset_);
    offset_ += step;
    count -= step;
    skip_empty();
  }
}

void IovecCursor::gather(std::byte* destination, size_t count) {
  while (count > 0 && !done()) {
    const ByteRange piece = contiguous();
    const size_t step = std::min(count, piece.length);
    std::memcpy(destination, piece.data, step);
    destination += step;
    count -= step;
    advance(step);
  }
}

void IovecCursor::scatter(const std::byte* source, size_t count) {
  while (count > 0 && !done()) {
    const ByteRange piece = contiguous();
    const size_t step = std::min(count, piece.length);
    std::memcpy(piece.data, source, step);
    source += step;
    count -= step;
    advance(step);
  }
}

void IovecCursor::skip_empty() {
  while (index_ < vectors_.size() && offset_ == vectors_[index_].iov_len) {
    ++index_;
    offset_ = 0;
  }
}

}  // namespace qpsock::stream
