// Tells an epoll set that sleeps on upgraded streams of a change one of our
// own threads made (a read that returned credit, a shutdown): the transport's
// wait handle only speaks of what the peer did, and the thread that made the
// change may have consumed that wakeup with its completion. For a transport
// without a wait handle, it also carries the peer's wakeups (the stream is
// told, as the transport's WakeupListener, and notifies it).
//
// An eventfd in the epoll set, written only while a waiter sleeps and only
// once until a woken waiter drains it, so a busy stream costs no system call.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/unique_fd.h"

namespace qpsock::stream {

class ReadinessSignal {
 public:
  ReadinessSignal() = default;
  ReadinessSignal(const ReadinessSignal&) = delete;
  ReadinessSignal& operator=(const ReadinessSignal&) = delete;

  int open();  // 0 or -errno
  int fd() const { return fd_.get(); }

  // Around a sleep in the epoll set: notify() writes only in between.
  void add_sleeper() { sleepers_.fetch_add(1, std::memory_order_seq_cst); }
  void remove_sleeper() { sleepers_.fetch_sub(1, std::memory_order_seq_cst); }
  void notify();
  // A waiter woke on the eventfd: it looks at every stream now.
  void drain();

 private:
  UniqueFd fd_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> signalled_{false};
};

}  // namespace qpsock::stream
