// How another thread wakes this one out of a poll(2) sleep on streams: an
// eventfd per sleeping thread, not per stream, so that a connection holds no
// descriptor for it (a process whose streams are driven by epoll, whose sets
// have their own signal, never makes one).
//
// A thread registers its waker with every stream it sleeps on
// (WakeSignal::add_sleeper, under that stream's lock), sleeps with fd() in
// its poll set, removes itself from every stream (under each lock again) and
// only then calls consume(): whoever signalled it did so under a lock the
// thread took afterwards, so the eventfd's count is there to drain, and no
// one signals it after (it is no longer registered).
//
// Made at a thread's first sleep and kept when the thread ends, for the next
// thread to sleep: a waker is never freed, so a registration left behind (a
// thread cancelled in its poll) costs at most a spurious wakeup, never a
// write to freed memory.
#pragma once

#include <atomic>

namespace qpsock::stream {

class ThreadWaker {
 public:
  // The calling thread's waker, made at its first call; nullptr when no
  // eventfd could be had (a descriptor limit): the caller then sleeps in
  // short slices (kUnwakeableSleepMs) and looks again.
  static ThreadWaker* of_this_thread();
  static constexpr int kUnwakeableSleepMs = 2;

  explicit ThreadWaker(int fd) : fd_(fd) {}
  ThreadWaker(const ThreadWaker&) = delete;
  ThreadWaker& operator=(const ThreadWaker&) = delete;

  int fd() const { return fd_; }
  // Makes fd() readable, once until consume(). Called under the lock of a
  // stream the owner sleeps on.
  void signal();
  // Drains fd() if it was signalled: after the owner left every stream.
  void consume();

 private:
  const int fd_;
  std::atomic<bool> signalled_{false};
};

}  // namespace qpsock::stream
