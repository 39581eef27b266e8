#include "transport/shm/immediate_queue.h"

#include <cerrno>

namespace qpsock::transport::shm {

ImmediateSender::ImmediateSender(InboxHeader* inbox, std::atomic<uint32_t>* slots,
                                 const ArenaLayout& layout, const std::atomic<uint64_t>* head)
    : inbox_(inbox),
      slots_(slots),
      head_(head),
      capacity_(layout.notification_capacity),
      mask_(layout.inbox_slots - 1) {}

bool ImmediateSender::push(uint32_t immediate) {
  if (tail_ - head_seen_ >= capacity_) {
    head_seen_ = head_->load(std::memory_order_acquire);
    if (tail_ - head_seen_ >= capacity_) return false;
  }
  // Relaxed: the store of the tail publishes it. That store is seq_cst, as
  // the consumer's check after arming is (wakeup.h): no lost wakeup.
  slots_[tail_ & mask_].store(immediate, std::memory_order_relaxed);
  inbox_->tail.store(++tail_, std::memory_order_seq_cst);
  return true;
}

ImmediateReceiver::ImmediateReceiver(const InboxHeader* inbox, const std::atomic<uint32_t>* slots,
                                     const ArenaLayout& layout, std::atomic<uint64_t>* head)
    : inbox_(inbox),
      slots_(slots),
      published_head_(head),
      capacity_(layout.notification_capacity),
      mask_(layout.inbox_slots - 1) {}

int ImmediateReceiver::pop(uint32_t& immediate) {
  if (head_ == tail_seen_) {
    const uint64_t tail = inbox_->tail.load(std::memory_order_acquire);
    // Not taken as seen: every later pop must refuse it too, never return
    // what the slots held before as if it were new.
    if (tail - head_ > capacity_) return -EPROTO;
    tail_seen_ = tail;
    if (head_ == tail_seen_) return 0;
  }
  immediate = slots_[head_ & mask_].load(std::memory_order_relaxed);
  // Released: the peer may reuse the slot once it sees the head move.
  published_head_->store(++head_, std::memory_order_release);
  return 1;
}

}  // namespace qpsock::transport::shm
