#include "stream/wake_signal.h"

#include <algorithm>

namespace qpsock::stream {

void WakeSignal::remove_sleeper(ThreadWaker* waker) {
  if (waker == nullptr) return;
  // One listing of it (a thread may list itself once per entry of a poll set).
  const auto found = std::find(sleepers_.begin(), sleepers_.end(), waker);
  if (found == sleepers_.end()) return;
  *found = sleepers_.back();
  sleepers_.pop_back();
  waker->unlisted();
}

}  // namespace qpsock::stream
