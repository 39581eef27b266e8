#include "stream/readiness_signal.h"

#include <sys/eventfd.h>

#include <cerrno>

#include "common/own_descriptor.h"
#include "libc/next_symbols.h"

namespace qpsock::stream {

int ReadinessSignal::open() {
  fd_.reset(keep_own_descriptor(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)));
  return fd_.valid() ? 0 : -errno;
}

void ReadinessSignal::notify() {
  if (sleepers_.load(std::memory_order_seq_cst) == 0) return;
  if (signalled_.exchange(true, std::memory_order_acq_rel)) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t count = next::write(fd_.get(), &one, sizeof(one));
}

void ReadinessSignal::drain() {
  // Read, then cleared. A notify in between writes nothing, and the waiter
  // looks at every stream after draining, under the lock the notifier changed
  // it under. Cleared first, a notify in between would write a count this
  // read takes, and leave the flag set with the eventfd empty: every later
  // notify would then write nothing, and the set would sleep through them.
  uint64_t drained;
  [[maybe_unused]] ssize_t count = next::read(fd_.get(), &drained, sizeof(drained));
  signalled_.store(false, std::memory_order_release);
}

}  // namespace qpsock::stream
