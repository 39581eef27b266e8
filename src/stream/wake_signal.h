// Wakes the threads of one stream that sleep in poll(2) when another thread
// changed what they wait for. Needed because progress is shared: the thread
// that polls a completion (say, credit a sleeping sender waits for) has also
// consumed the transport's wakeup, so the sleeper must be told another way.
//
// An eventfd that stays readable while anyone sleeps; the last sleeper to
// leave drains it. All calls but open() and fd() are made under the stream's
// state lock, so a state change either happens before a sleeper checks its
// condition, or after it counted itself in (and then the fd is readable).
#pragma once

#include <cstdint>

#include "common/unique_fd.h"

namespace qpsock::stream {

class WakeSignal {
 public:
  WakeSignal() = default;
  WakeSignal(const WakeSignal&) = delete;
  WakeSignal& operator=(const WakeSignal&) = delete;

  int open();  // 0 or -errno
  int fd() const { return fd_.get(); }

  void add_sleeper() { ++sleepers_; }
  void remove_sleeper();
  void notify();

 private:
  UniqueFd fd_;
  uint32_t sleepers_ = 0;
  bool signalled_ = false;
};

}  // namespace qpsock::stream
