// The process's one background thread for what must happen while the
// application does not call in (UCX's ucs async thread): it sleeps in epoll
// on descriptors that layers hand it and calls their callback. Started at
// the first watch; a forked child starts with none (the parent's thread,
// set and watches stay the parent's).
//
// A watch names a callback (a plain function: it outlives every watch) and
// a tag of the caller's (at most 56 bits: an fd number, a serial), never an
// object: an event may come after the object it was about is gone, so the
// callback finds its object again by the tag, or finds nothing. A watched
// descriptor leaves the set when its file's last copy is closed (one another
// process holds too: unwatch_in_background); register it
// edge-triggered or one-shot, or a readiness the callback does not consume
// keeps the thread awake.
#pragma once

#include <cstdint>

namespace qpsock {

// Called on the loop's thread, no lock of the loop held. It may watch more.
using BackgroundCallback = void (*)(uint64_t tag, uint32_t events);

inline constexpr uint64_t kLargestBackgroundTag = (uint64_t{1} << 56) - 1;

// Adds `fd` (open for the length of the call) for `events` (epoll flags),
// to call `callback(tag, events)`; EEXIST re-arms it with these. 0, or
// -errno (no thread could start, or the kernel refused the watch), for the
// caller's one log line. Takes the loop's lock (held across fork) unless
// the loop runs and knows `callback` already.
int watch_in_background(int fd, uint32_t events, BackgroundCallback callback, uint64_t tag);

// Takes `fd` out of the loop's set: for a descriptor whose file another
// process may hold too (one passed with SCM_RIGHTS), which closing ours
// does not take out. No lock.
void unwatch_in_background(int fd);

// Starts the loop and makes `callback` known to it: 0, or -errno. After it,
// watch_in_background with that callback takes no lock in this process,
// for a caller that holds what a lock holder may wait for (an FdUse,
// common/kept_fd.h).
int prepare_background_callback(BackgroundCallback callback);

// Makes the loop's process-wide state (no thread yet). A fork-aware object
// (common/fork_aware_instance.h) that calls watch_in_background() under its
// own lock calls this in its constructor: fork then takes the loop's lock
// after its own, in the order the calls nest, never the other way round.
void prepare_background_loop();

// Whether the caller runs on the loop's thread (in one of its callbacks):
// a wait there cannot count on a wakeup that the loop itself delivers.
bool on_background_thread();

}  // namespace qpsock
