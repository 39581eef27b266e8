#include "transport/shm/link_mailbox.h"

#include <cerrno>
#include <cstring>

namespace qpsock::transport::shm {

int post_link_message(PeerPool& peer, const LinkMessage& message) {
  std::lock_guard lock(peer.sender_mutex());
  PoolHeader& header = peer.header();
  const uint64_t tail = header.mailbox_tail.load(std::memory_order_relaxed);
  const uint64_t head = header.mailbox_head.load(std::memory_order_acquire);
  if (tail - head >= kMailboxSlots) return -EAGAIN;
  std::memcpy(static_cast<void*>(&header.mailbox[tail % kMailboxSlots]), &message, sizeof(message));
  // seq_cst: visible before the doorbell that tells of it.
  header.mailbox_tail.store(tail + 1);
  return 0;
}

size_t take_link_messages(OwnPool& own, stream::FunctionRef<void(const LinkMessage&)> taken) {
  PoolHeader& header = own.header();
  uint64_t head = header.mailbox_head.load(std::memory_order_relaxed);
  const uint64_t tail = header.mailbox_tail.load(std::memory_order_acquire);
  if (tail - head > kMailboxSlots) {
    // Not a count the peer could have written: skip to where it says.
    header.mailbox_head.store(tail, std::memory_order_release);
    return 0;
  }
  size_t count = 0;
  for (; head != tail; ++head, ++count) {
    LinkMessage message;
    std::memcpy(&message, static_cast<const void*>(&header.mailbox[head % kMailboxSlots]),
                sizeof(message));
    // The slot is free once copied.
    header.mailbox_head.store(head + 1, std::memory_order_release);
    taken(message);
  }
  return count;
}

}  // namespace qpsock::transport::shm
