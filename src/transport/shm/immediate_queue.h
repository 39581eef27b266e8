// The single-producer, single-consumer queue of immediates in an arena's
// inbox part (arena_layout.h): the peer pushes (ImmediateSender, writing the
// slot and then the tail with release), the owner pops (ImmediateReceiver,
// advancing the head in its control block). The owner's notification
// capacity bounds what may be unpolled: one push more is what RDMA calls
// receiver-not-ready, and the sender reports it instead of overwriting.
#pragma once

#include <atomic>
#include <cstdint>

#include "transport/shm/arena_layout.h"

namespace qpsock::transport::shm {

class ImmediateSender {
 public:
  ImmediateSender() = default;
  // `inbox`, `slots`: the peer's inbox; `head`: the peer's consumer index.
  ImmediateSender(InboxHeader* inbox, std::atomic<uint32_t>* slots, const ArenaLayout& layout,
                  const std::atomic<uint64_t>* head);
  // False, with nothing pushed, if the peer already holds its capacity.
  bool push(uint32_t immediate);

 private:
  InboxHeader* inbox_ = nullptr;
  std::atomic<uint32_t>* slots_ = nullptr;
  const std::atomic<uint64_t>* head_ = nullptr;
  uint32_t capacity_ = 0;
  uint32_t mask_ = 0;
  uint64_t tail_ = 0;       // ours: only we write the tail
  uint64_t head_seen_ = 0;  // the head when we last looked
};

class ImmediateReceiver {
 public:
  ImmediateReceiver() = default;
  ImmediateReceiver(const InboxHeader* inbox, const std::atomic<uint32_t>* slots,
                    const ArenaLayout& layout, std::atomic<uint64_t>* head);
  // 1 with an immediate, 0 if none is there, -EPROTO if the peer's tail
  // claims more than our capacity (a broken peer).
  int pop(uint32_t& immediate);
  // seq_cst: the check after arming (wakeup.h).
  bool pending() const { return inbox_->tail.load(std::memory_order_seq_cst) != head_; }

 private:
  const InboxHeader* inbox_ = nullptr;
  const std::atomic<uint32_t>* slots_ = nullptr;
  std::atomic<uint64_t>* published_head_ = nullptr;
  uint32_t capacity_ = 0;
  uint32_t mask_ = 0;
  uint64_t head_ = 0;
  uint64_t tail_seen_ = 0;
};

}  // namespace qpsock::transport::shm
