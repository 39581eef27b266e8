// A mutex for the stream's hot path. Uncontended, lock and unlock are one
// atomic instruction each, inline; std::mutex calls into glibc for both
// (about 60 instructions a pair, and a 64-byte message's write and read
// take four pairs). Contended, waiters sleep in futex(2), as glibc's do.
// Not recursive, no owner checks: a plain mutex for short critical
// sections. Drepper's "Futexes Are Tricky", mutex #3.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

namespace qpsock {

class FutexMutex {
 public:
  FutexMutex() = default;
  FutexMutex(const FutexMutex&) = delete;
  FutexMutex& operator=(const FutexMutex&) = delete;

  void lock() {
    uint32_t expected = kFree;
    if (state_.compare_exchange_strong(expected, kHeld, std::memory_order_acquire)) [[likely]]
      return;
    lock_contended(expected);
  }

  bool try_lock() {
    uint32_t expected = kFree;
    return state_.compare_exchange_strong(expected, kHeld, std::memory_order_acquire);
  }

  void unlock() {
    if (state_.exchange(kFree, std::memory_order_release) == kHeldWithWaiters) [[unlikely]]
      wake_one();
  }

 private:
  static constexpr uint32_t kFree = 0;
  static constexpr uint32_t kHeld = 1;
  static constexpr uint32_t kHeldWithWaiters = 2;

  // Out of line: the common path stays small. errno is left as it was
  // (futex may fail with EAGAIN or EINTR, both simply mean "look again").
  [[gnu::noinline]] void lock_contended(uint32_t seen) {
    const int saved_errno = errno;
    if (seen != kHeldWithWaiters) seen = state_.exchange(kHeldWithWaiters, std::memory_order_acquire);
    while (seen != kFree) {
      syscall(SYS_futex, futex_word(), FUTEX_WAIT_PRIVATE, kHeldWithWaiters, nullptr, nullptr, 0);
      seen = state_.exchange(kHeldWithWaiters, std::memory_order_acquire);
    }
    errno = saved_errno;
  }

  [[gnu::noinline]] void wake_one() {
    const int saved_errno = errno;
    syscall(SYS_futex, futex_word(), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    errno = saved_errno;
  }

  uint32_t* futex_word() { return reinterpret_cast<uint32_t*>(&state_); }

  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  std::atomic<uint32_t> state_{kFree};
};

}  // namespace qpsock
