// Ring credit: the sender may write into the peer's ring only what the peer
// has consumed, so it can never overrun the ring (and no write ever meets an
// unready receiver). Counts are monotonic ring offsets in bytes.
#pragma once

#include <cstdint>

namespace qpsock::stream {

// The sender's side: how much of the peer's ring it may still fill.
class SendCredit {
 public:
  explicit SendCredit(uint64_t peer_ring_size) : ring_size_(peer_ring_size) {}

  uint64_t written() const { return written_; }
  // Every byte written has been consumed and credited back by the peer.
  bool all_consumed() const { return peer_consumed_ == written_; }
  uint64_t credit_limit() const { return peer_consumed_ + ring_size_; }
  // Ring bytes the sender may write now. A staged record's bytes sit at the
  // same position of the staging buffer, so the staging slot must be free as
  // well: its earlier write must have completed, not only been consumed.
  uint64_t room() const;

  void on_written(uint64_t ring_bytes) { written_ += ring_bytes; }
  // The peer consumed `ring_bytes` more; false if that is more than was
  // written (a protocol error).
  bool on_credit(uint64_t ring_bytes);
  // A write ending at ring offset `ring_end` completed locally (writes
  // complete in order, so everything before it has too).
  void on_write_completed(uint64_t ring_end);

 private:
  uint64_t ring_size_;
  uint64_t written_ = 0;
  uint64_t peer_consumed_ = 0;
  uint64_t completed_ = 0;
};

// The receiver's side: what it consumed and when to tell the sender.
class ReceiveCredit {
 public:
  explicit ReceiveCredit(uint64_t ring_size) : ring_size_(ring_size) {}

  uint64_t consumed() const { return consumed_; }
  uint64_t unreturned() const { return unreturned_; }
  // `sender_wants_credit`: the record carried kRecordCreditWanted.
  void on_consumed(uint64_t ring_bytes, bool sender_wants_credit);
  // Ring bytes worth a credit notification now: everything unreturned once a
  // quarter of the ring is, or at once when the sender said it is blocked.
  uint64_t to_return() const;
  void on_returned(uint64_t ring_bytes);

 private:
  uint64_t ring_size_;
  uint64_t consumed_ = 0;
  uint64_t unreturned_ = 0;
  bool sender_wants_credit_ = false;
};

}  // namespace qpsock::stream
