// Our completion queue for our own posts: shm posts finish at post time, so
// their completions wait here, in post order, until polled. Fixed capacity
// (the send queue depth), allocated once: no allocation on the data path.
// Used only under the engine's serialization of posts and polls.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "stream/transport.h"

namespace qpsock::transport::shm {

class CompletionQueue {
 public:
  explicit CompletionQueue(size_t capacity) : entries_(capacity) {}

  bool full() const { return count_ == entries_.size(); }
  bool empty() const { return count_ == 0; }
  // The caller checked full() before posting.
  void push(const stream::Completion& completion) {
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
  std::vector<stream::Completion> entries_;
  size_t first_ = 0;
  size_t count_ = 0;
};

}  // namespace qpsock::transport::shm
