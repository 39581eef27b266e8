// Our posts awaiting their completions, in post order. Every post is
// signaled and an RC send queue completes in post order, so a send completion
// always belongs to the oldest entry. Its kind and cookie come from here: an
// error completion's opcode is undefined, and a flushed one must still name
// the post it ends. Fixed capacity (the send queue depth), allocated once.
// Used only under the engine's serialization of posts and polls.
#pragma once

#include <cstdint>
#include <vector>

#include "stream/transport.h"

namespace qpsock::transport::verbs {

// Receive work requests carry this id; posts carry their sequence number,
// which stays below it.
inline constexpr uint64_t kReceiveWorkRequestId = uint64_t{1} << 63;

class PostLedger {
 public:
  struct Entry {
    stream::CompletionKind kind;
    uint64_t cookie;
  };

  explicit PostLedger(uint32_t capacity) : entries_(capacity) {}

  bool full() const { return next_ - oldest_ == entries_.size(); }
  uint64_t in_flight() const { return next_ - oldest_; }
  // The work request id the next post gets.
  uint64_t next_id() const { return next_; }
  // Records a post made with next_id(); the caller checked full().
  void push(const Entry& entry) { entries_[next_++ % entries_.size()] = entry; }
  // Takes the oldest entry if `work_request_id` names it; false if it does
  // not (a completion of a post we never made).
  bool pop(uint64_t work_request_id, Entry& entry) {
    if (next_ == oldest_ || work_request_id != oldest_) return false;
    entry = entries_[oldest_++ % entries_.size()];
    return true;
  }

 private:
  std::vector<Entry> entries_;
  uint64_t oldest_ = 0;
  uint64_t next_ = 0;
};

}  // namespace qpsock::transport::verbs
