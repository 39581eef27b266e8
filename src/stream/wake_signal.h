// Wakes the threads of one stream that sleep in poll(2) when another thread
// changed what they wait for. Needed because progress is shared: the thread
// that polls a completion (say, credit a sleeping sender waits for) has also
// consumed the transport's wakeup, so the sleeper must be told another way.
//
// The sleepers' own wakers (thread_waker.h) are listed while they sleep;
// the stream holds no descriptor for it. All calls are made under the
// stream's state lock, so a state change either happens before a sleeper
// checks its condition, or after it listed itself (and then its waker's fd
// is readable).
#pragma once

#include <vector>

#include "stream/thread_waker.h"

namespace qpsock::stream {

class WakeSignal {
 public:
  // Room for a few sleepers, so that listing one rarely allocates.
  WakeSignal() { sleepers_.reserve(4); }
  WakeSignal(const WakeSignal&) = delete;
  WakeSignal& operator=(const WakeSignal&) = delete;

  // A thread without a waker (nullptr) sleeps in short slices instead.
  void add_sleeper(ThreadWaker* waker) {
    if (waker == nullptr) return;
    waker->listed();
    sleepers_.push_back(waker);
  }
  void remove_sleeper(ThreadWaker* waker);
  void notify() {
    for (ThreadWaker* sleeper : sleepers_) sleeper->signal();
  }
  // Whether no thread but the one with `waker` is listed (none at all, too).
  bool lists_only(const ThreadWaker* waker) const {
    for (const ThreadWaker* sleeper : sleepers_)
      if (sleeper != waker) return false;
    return true;
  }

 private:
  std::vector<ThreadWaker*> sleepers_;
};

}  // namespace qpsock::stream
