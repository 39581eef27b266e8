#include "transport/shm/wakeup.h"

#include <sys/epoll.h>
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

int Wakeup::open(int pidfd) {
  event_fd_.reset(keep_own_descriptor(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)));
  if (!event_fd_.valid()) return -errno;
  epoll_.reset(keep_own_descriptor(next::epoll_create1(EPOLL_CLOEXEC)));
  if (!epoll_.valid()) return -errno;
  for (int fd : {event_fd_.get(), pidfd}) {
    epoll_event interest{};
    interest.events = EPOLLIN;
    interest.data.fd = fd;
    if (next::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &interest) != 0) return -errno;
  }
  return 0;
}

void Wakeup::forget_peer(int pidfd) {
  next::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, pidfd, nullptr);
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
