#include "transport/shm/link_offers.h"

namespace qpsock::transport::shm {
namespace {

// Slots a lookup visits from the inode's own.
constexpr uint32_t kProbe = 32;

uint32_t home_slot(uint64_t inode) {
  // Fibonacci hashing: socket inodes are handed out in sequence.
  return static_cast<uint32_t>((inode * 0x9e3779b97f4a7c15ull) >> 50) % kOfferSlots;
}

}  // namespace

bool publish_offer(PoolHeader& own, uint64_t inode) {
  if (inode == 0 || inode == kOfferRemoved) return false;
  const uint32_t home = home_slot(inode);
  for (uint32_t step = 0; step < kProbe; ++step) {
    std::atomic<uint64_t>& slot = own.offers[(home + step) % kOfferSlots];
    uint64_t seen = slot.load(std::memory_order_relaxed);
    if (seen == inode) return true;
    if ((seen == 0 || seen == kOfferRemoved) &&
        slot.compare_exchange_strong(seen, inode, std::memory_order_release))
      return true;
  }
  return false;
}

void withdraw_offer(PoolHeader& own, uint64_t inode) {
  if (inode == 0 || inode == kOfferRemoved) return;
  const uint32_t home = home_slot(inode);
  for (uint32_t step = 0; step < kProbe; ++step) {
    std::atomic<uint64_t>& slot = own.offers[(home + step) % kOfferSlots];
    uint64_t seen = inode;
    if (slot.compare_exchange_strong(seen, kOfferRemoved, std::memory_order_release)) return;
    if (seen == 0) return;
  }
}

bool offers(const PoolHeader& peer, uint64_t inode) {
  if (inode == 0 || inode == kOfferRemoved) return false;
  const uint32_t home = home_slot(inode);
  for (uint32_t step = 0; step < kProbe; ++step) {
    const uint64_t seen = peer.offers[(home + step) % kOfferSlots].load(std::memory_order_acquire);
    if (seen == inode) return true;
    if (seen == 0) return false;
  }
  return false;
}

}  // namespace qpsock::transport::shm
