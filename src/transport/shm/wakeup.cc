#include "transport/shm/wakeup.h"

#include "libc/next_symbols.h"

namespace qpsock::transport::shm {
namespace {

// The word: the state in its low two bits, above them the sleeper's eventfd
// number + 1 (0: none named).
constexpr uint32_t kStateMask = 3;
constexpr int kSleeperShift = 2;
constexpr uint32_t kLargestSleeperFd = (UINT32_MAX >> kSleeperShift) - 1;

constexpr uint32_t state(WaiterState value) { return static_cast<uint32_t>(value); }

}  // namespace

void wake_if_armed(std::atomic<uint32_t>& waiter, const DoorbellTarget& doorbell, uint32_t slot,
                   stream::FunctionRef<int(uint32_t)> sleeper_fd) {
  uint32_t word = waiter.load();
  if ((word & kStateMask) != state(WaiterState::armed)) return;
  if (!waiter.compare_exchange_strong(word, (word & ~kStateMask) | state(WaiterState::signalled)))
    return;
  const uint32_t named = word >> kSleeperShift;
  if (named != 0) {
    if (const int fd = sleeper_fd(named - 1); fd >= 0) {
      const uint64_t one = 1;
      if (next::write(fd, &one, sizeof(one)) == sizeof(one)) return;
    }
  }
  ring_doorbell(doorbell, slot);
}

void arm_waiter(std::atomic<uint32_t>& waiter, int sole_sleeper_fd) {
  uint32_t word = state(WaiterState::armed);
  if (sole_sleeper_fd >= 0 && static_cast<uint32_t>(sole_sleeper_fd) <= kLargestSleeperFd)
    word |= (static_cast<uint32_t>(sole_sleeper_fd) + 1) << kSleeperShift;
  waiter.store(word);
}

void consume_wakeup(std::atomic<uint32_t>& waiter) {
  const uint32_t word = waiter.load(std::memory_order_acquire);
  if ((word & kStateMask) == state(WaiterState::signalled))
    waiter.store(state(WaiterState::idle), std::memory_order_relaxed);
}

}  // namespace qpsock::transport::shm
