#include "transport/shm/wakeup.h"

#include <sys/eventfd.h>

#include <cerrno>

#include "common/own_descriptor.h"
#include "libc/next_symbols.h"

namespace qpsock::transport::shm {
namespace {

constexpr uint32_t state(WaiterState value) { return static_cast<uint32_t>(value); }

}  // namespace

void wake_if_armed(std::atomic<uint32_t>& waiter, int event_fd) {
  if (waiter.load() != state(WaiterState::armed)) return;
  uint32_t expected = state(WaiterState::armed);
  if (!waiter.compare_exchange_strong(expected, state(WaiterState::signalled))) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t written = next::write(event_fd, &one, sizeof(one));
}

int Wakeup::open() {
  event_fd_.reset(keep_own_descriptor(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)));
  return event_fd_.valid() ? 0 : -errno;
}

void Wakeup::arm(std::atomic<uint32_t>& waiter) {
  if (waiter.load(std::memory_order_relaxed) == state(WaiterState::signalled)) drain();
  waiter.store(state(WaiterState::armed));
}

WaiterState Wakeup::consume(std::atomic<uint32_t>& waiter) {
  const auto found = static_cast<WaiterState>(waiter.load(std::memory_order_acquire));
  if (found == WaiterState::signalled) {
    drain();
    // Only we leave `signalled`: no waker can race this store.
    waiter.store(state(WaiterState::idle), std::memory_order_relaxed);
  }
  return found;
}

void Wakeup::drain() {
  uint64_t count;
  [[maybe_unused]] ssize_t drained = next::read(event_fd_.get(), &count, sizeof(count));
}

}  // namespace qpsock::transport::shm
