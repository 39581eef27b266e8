// Our completion queue for our own posts: shm posts finish at post time, so
// their completions wait here, in post order, until polled. At most the
// send queue depth, but sized to what the connection has needed: it starts
// at 16 entries and doubles when a push finds it full (an idle connection
// holds 384 bytes here, not 24 KiB), so the data path allocates only while
// a connection first reaches a new depth.
// Used only under the engine's serialization of posts and polls.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "stream/transport.h"

namespace qpsock::transport::shm {

class CompletionQueue {
 public:
  explicit CompletionQueue(size_t capacity) : capacity_(capacity) {}

  bool full() const { return count_ == capacity_; }
  bool empty() const { return count_ == 0; }
  // The caller checked full() before posting.
  void push(const stream::Completion& completion) {
    if (count_ == entries_.size()) grow();
    entries_[(first_ + count_) % entries_.size()] = completion;
    ++count_;
  }
  // Moves up to out.size() completions into `out`; how many.
  size_t pop_into(std::span<stream::Completion> out) {
    size_t moved = 0;
    while (moved < out.size() && count_ > 0) {
      out[moved++] = entries_[first_];
      first_ = (first_ + 1) % entries_.size();
      --count_;
    }
    return moved;
  }

 private:
  static constexpr size_t kFirstSize = 16;

  // Twice the entries (at most the capacity), the queued ones first.
  void grow() {
    std::vector<stream::Completion> larger(
        std::min(capacity_, std::max(kFirstSize, entries_.size() * 2)));
    for (size_t index = 0; index < count_; ++index)
      larger[index] = entries_[(first_ + index) % entries_.size()];
    entries_.swap(larger);
    first_ = 0;
  }

  size_t capacity_;
  std::vector<stream::Completion> entries_;
  size_t first_ = 0;
  size_t count_ = 0;
};

}  // namespace qpsock::transport::shm
