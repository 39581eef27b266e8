#include "stream/wake_signal.h"

#include <sys/eventfd.h>

#include <cerrno>

#include "libc/next_symbols.h"

namespace qpsock::stream {

WakeSignal::~WakeSignal() {
  if (fd_ >= 0) next::close(fd_);
}

int WakeSignal::open() {
  fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  return fd_ < 0 ? -errno : 0;
}

void WakeSignal::remove_sleeper() {
  if (--sleepers_ == 0 && signalled_) {
    uint64_t drained;
    [[maybe_unused]] ssize_t count = next::read(fd_, &drained, sizeof(drained));
    signalled_ = false;
  }
}

void WakeSignal::notify() {
  if (sleepers_ == 0 || signalled_) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t count = next::write(fd_, &one, sizeof(one));
  signalled_ = true;
}

}  // namespace qpsock::stream
