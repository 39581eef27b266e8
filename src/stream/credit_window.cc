#include "stream/credit_window.h"

#include <algorithm>

namespace qpsock::stream {

uint64_t SendCredit::room() const {
  const uint64_t limit = std::min(credit_limit(), completed_ + ring_size_);
  return limit > written_ ? limit - written_ : 0;
}

bool SendCredit::on_credit(uint64_t ring_bytes) {
  if (ring_bytes > written_ - peer_consumed_) return false;
  peer_consumed_ += ring_bytes;
  return true;
}

void SendCredit::on_write_completed(uint64_t ring_end) { completed_ = std::max(completed_, ring_end); }

void ReceiveCredit::on_consumed(uint64_t ring_bytes, bool sender_wants_credit) {
  consumed_ += ring_bytes;
  unreturned_ += ring_bytes;
  sender_wants_credit_ = sender_wants_credit_ || sender_wants_credit;
}

uint64_t ReceiveCredit::to_return() const {
  if (unreturned_ == 0) return 0;
  if (unreturned_ >= ring_size_ / 4 || sender_wants_credit_) return unreturned_;
  return 0;
}

void ReceiveCredit::on_returned(uint64_t ring_bytes) {
  unreturned_ -= std::min(ring_bytes, unreturned_);
  if (unreturned_ == 0) sender_wants_credit_ = false;
}

}  // namespace qpsock::stream
