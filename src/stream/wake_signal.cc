#include "stream/wake_signal.h"

#include <sys/eventfd.h>

#include <cerrno>

#include "common/own_descriptor.h"
#include "libc/next_symbols.h"

namespace qpsock::stream {

int WakeSignal::open() {
  fd_.reset(keep_own_descriptor(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)));
  return fd_.valid() ? 0 : -errno;
}

void WakeSignal::remove_sleeper() {
  if (--sleepers_ == 0 && signalled_) {
    uint64_t drained;
    [[maybe_unused]] ssize_t count = next::read(fd_.get(), &drained, sizeof(drained));
    signalled_ = false;
  }
}

void WakeSignal::notify() {
  if (sleepers_ == 0 || signalled_) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t count = next::write(fd_.get(), &one, sizeof(one));
  signalled_ = true;
}

}  // namespace qpsock::stream
