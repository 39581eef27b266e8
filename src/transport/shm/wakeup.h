// Sleeping and waking across the two processes. Each endpoint has an eventfd
// and a waiter word in its inbox (WaiterState). The owner arms before it
// sleeps; whoever gives it something to poll (the peer's immediate, our own
// completion for another of our threads, a disconnect) writes the eventfd
// only if the word says armed, flipping it to signalled, so a busy receiver
// costs the sender no system call. The owner's poll drains the eventfd once
// it was signalled.
//
// No wakeup is lost: the owner stores `armed` and then looks for work, the
// waker publishes work and then looks at the word, and all four accesses are
// seq_cst (not fences, which ThreadSanitizer does not model), so at least one
// of them sees the other.
//
// The wait handle the engine sleeps on is the eventfd itself; the peer's
// death is told by the background loop, which wakes it as a peer would
// (peer_process.h).
#pragma once

#include <atomic>
#include <cstdint>

#include "common/unique_fd.h"

namespace qpsock::transport::shm {

enum class WaiterState : uint32_t { idle = 0, armed = 1, signalled = 2 };

// The waker's side: after publishing work with a seq_cst store.
void wake_if_armed(std::atomic<uint32_t>& waiter, int event_fd);

class Wakeup {
 public:
  // The eventfd (also the wait handle); 0 or -errno.
  int open();
  int event_fd() const { return event_fd_.get(); }

  // Requests a wakeup: the caller then looks for work and calls
  // wake_if_armed(waiter, event_fd()) on itself if it found some.
  void arm(std::atomic<uint32_t>& waiter);
  // Drains the eventfd if it was signalled; returns the state found.
  WaiterState consume(std::atomic<uint32_t>& waiter);

 private:
  void drain();

  UniqueFd event_fd_;
};

}  // namespace qpsock::transport::shm
