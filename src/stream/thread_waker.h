// How another thread wakes this one out of a poll(2) sleep on streams: an
// eventfd per sleeping thread, not per stream, so that a connection holds no
// descriptor for it (a process whose streams are driven by epoll, whose sets
// have their own signal, never makes one).
//
// A sleep holds a ThreadSleep. The thread lists its waker with every stream
// it sleeps on (WakeSignal::add_sleeper, under that stream's lock), sleeps
// with fd() in its poll set, removes itself from every stream (under each
// lock again) and only then calls ThreadSleep::consume(): whoever signalled
// it did so under a lock the thread took afterwards, so the eventfd's count
// is there to drain, and no one signals it after (it is no longer listed).
//
// One sleep at a time per waker: a sleep nested in another of the same
// thread (a signal handler's blocking call) gets no waker and sleeps in
// short slices, rather than drain a signal meant for the sleep it
// interrupted. So does a sleep on the background loop's thread (a
// lingering close), which is where transports without a wait handle have
// their wakeups delivered from. A waker is made at a thread's first sleep and kept for the
// next thread when the thread ends, unless a stream still lists it (a
// thread cancelled in its poll): then it is left to that stream, and never
// freed, so a stale listing writes to an eventfd nobody reads. A forked
// child gives every waker a new eventfd under the same number: the parent's
// threads keep theirs.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>

namespace qpsock::stream {

class ThreadWaker {
 public:
  explicit ThreadWaker(int fd) : fd_(fd) {}
  ThreadWaker(const ThreadWaker&) = delete;
  ThreadWaker& operator=(const ThreadWaker&) = delete;

  int fd() const { return fd_; }
  // Makes fd() readable, once until consumed. Called under the lock of a
  // stream that lists this waker.
  void signal();
  // A stream lists it, or no longer does (under that stream's lock).
  void listed() { listings_.fetch_add(1, std::memory_order_relaxed); }
  void unlisted() { listings_.fetch_sub(1, std::memory_order_relaxed); }
  bool listed_anywhere() const { return listings_.load(std::memory_order_relaxed) != 0; }

  // Drains fd() (signalled here, or written by a peer process that a
  // transport armed for this thread alone told to).
  void consume();
  // In a forked child: a new eventfd under the same number; false if none
  // could be made (the waker is then never used again).
  bool renew_after_fork();

 private:
  const int fd_;
  std::atomic<bool> signalled_{false};
  std::atomic<uint32_t> listings_{0};
};

// The calling thread's waker for one sleep (see the header).
class ThreadSleep {
 public:
  ThreadSleep();
  ~ThreadSleep();
  ThreadSleep(const ThreadSleep&) = delete;
  ThreadSleep& operator=(const ThreadSleep&) = delete;

  // Null when the thread must sleep in slices: no eventfd could be had,
  // this sleep is nested in another of the thread's, or this is the
  // background loop's thread.
  ThreadWaker* waker() const { return waker_; }
  int fd() const { return waker_ != nullptr ? waker_->fd() : -1; }
  // The sleep's timeout, poll's (milliseconds, -1: none) or ppoll's (null:
  // none): as given, or a 2 ms slice for a thread no other can wake, which
  // then looks again.
  int bounded(int timeout_ms) const;
  const timespec* bounded(const timespec* timeout) const;
  // After leaving every stream: drains the waker, for the next sleep.
  void consume() {
    if (waker_ != nullptr) waker_->consume();
  }

 private:
  ThreadWaker* waker_ = nullptr;
};

}  // namespace qpsock::stream
