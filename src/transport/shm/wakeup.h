// Sleeping and waking across the two processes, per channel. Each endpoint
// has a waiter word in its inbox: a WaiterState, and, when the owner armed
// it for one sleeping thread, that thread's waker eventfd number. The owner
// arms before it sleeps; whoever gives it something to poll (the peer's
// immediate, our own completion for another of our threads, a disconnect)
// wakes it only if the word says armed, flipping it to signalled, so a busy
// receiver costs the sender no system call. The wakeup writes the named
// eventfd (the peer takes it once with pidfd_getfd, PeerProcess::sleeper_fd)
// or, with none named or none to be had, rings the owner's link doorbell
// for the channel's slot (link_doorbell.h), whose loop tells the stream.
// The owner's poll takes the word back to idle.
//
// No wakeup is lost: the owner stores `armed` and then looks for work, the
// waker publishes work and then looks at the word, and all four accesses are
// seq_cst (not fences, which ThreadSanitizer does not model), so at least one
// of them sees the other.
#pragma once

#include <atomic>
#include <cstdint>

#include "stream/function_ref.h"
#include "transport/shm/link_doorbell.h"

namespace qpsock::transport::shm {

enum class WaiterState : uint32_t { idle = 0, armed = 1, signalled = 2 };

// The waker's side: after publishing work with a seq_cst store.
// `sleeper_fd(number)` gives the eventfd to write for the number the word
// names, or -1 (then the doorbell rings).
void wake_if_armed(std::atomic<uint32_t>& waiter, const DoorbellTarget& doorbell, uint32_t slot,
                   stream::FunctionRef<int(uint32_t)> sleeper_fd);

// The owner's side: requests a wakeup (of `sole_sleeper_fd`, or of the
// listener if -1); the caller then looks for work.
void arm_waiter(std::atomic<uint32_t>& waiter, int sole_sleeper_fd);
// Back to idle if it was signalled (only the owner leaves `signalled`).
void consume_wakeup(std::atomic<uint32_t>& waiter);

}  // namespace qpsock::transport::shm
