#include "stream/thread_waker.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <vector>

#include "common/background_loop.h"
#include "common/errno_guard.h"
#include "common/fork_aware_instance.h"
#include "common/own_descriptor.h"
#include "libc/next_symbols.h"

namespace qpsock::stream {
namespace {

// The thread's waker: a plain pointer, still readable in a program's exit
// handlers after the thread's destructors ran (a new waker is then made).
constinit __attribute__((tls_model("initial-exec"))) thread_local ThreadWaker* this_threads_waker = nullptr;
// Set while the thread is in a sleep, or making its waker: a signal handler
// interrupting either gets none.
constinit __attribute__((tls_model("initial-exec"))) thread_local bool this_thread_busy = false;

// How long a thread without a waker sleeps before it looks again.
constexpr int kUnwakeableSleepMs = 2;
constexpr timespec kUnwakeableSleep{0, kUnwakeableSleepMs * 1'000'000L};

// Every waker made, and those whose threads ended, for the next thread
// that sleeps. Never destroyed (see the header). Its lock is held across
// fork, as a thread may be ending while another forks.
class Wakers : public HelperLock {
 public:
  ThreadWaker* take() {
    std::lock_guard lock(*this);
    if (!idle_.empty()) {
      ThreadWaker* waker = idle_.back();
      idle_.pop_back();
      return waker;
    }
    ErrnoGuard errno_guard;
    const int fd = keep_own_descriptor(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (fd < 0) return nullptr;
    return &made_.emplace_back(fd);
  }
  void give_back(ThreadWaker* waker) {
    std::lock_guard lock(*this);
    idle_.push_back(waker);
  }
  // The descriptors came along and are the parent's open files too: each
  // gets a new one (the child runs only the forking thread now).
  void forget_after_fork() {
    idle_.clear();
    for (ThreadWaker& waker : made_) {
      if (!waker.renew_after_fork()) {
        if (this_threads_waker == &waker) this_threads_waker = nullptr;
        continue;
      }
      if (this_threads_waker != &waker && !waker.listed_anywhere()) idle_.push_back(&waker);
    }
  }

 private:
  std::deque<ThreadWaker> made_;  // never moves what it holds
  std::vector<ThreadWaker*> idle_;
};

// Gives the waker back when the thread ends, unless a stream still lists it.
struct WakerReturn {
  ~WakerReturn() {
    if (this_threads_waker != nullptr && !this_threads_waker->listed_anywhere())
      fork_aware_instance<Wakers>().give_back(this_threads_waker);
    this_threads_waker = nullptr;
  }
};

}  // namespace

ThreadSleep::ThreadSleep() {
  if (this_thread_busy) return;  // nested in this thread's own sleep
  // Transports without a wait handle are heard of through the loop itself.
  if (on_background_thread()) return;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  this_thread_busy = true;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (this_threads_waker == nullptr) [[unlikely]] {
    thread_local WakerReturn on_thread_end;
    (void)on_thread_end;
    this_threads_waker = fork_aware_instance<Wakers>().take();
  }
  waker_ = this_threads_waker;
  if (waker_ == nullptr) this_thread_busy = false;
}

ThreadSleep::~ThreadSleep() {
  if (waker_ == nullptr) return;
  waker_->consume();
  std::atomic_signal_fence(std::memory_order_seq_cst);
  this_thread_busy = false;
}

int ThreadSleep::bounded(int timeout_ms) const {
  if (waker_ != nullptr) return timeout_ms;
  return timeout_ms < 0 ? kUnwakeableSleepMs : std::min(timeout_ms, kUnwakeableSleepMs);
}

const timespec* ThreadSleep::bounded(const timespec* timeout) const {
  if (waker_ != nullptr) return timeout;
  if (timeout != nullptr && timeout->tv_sec == 0 && timeout->tv_nsec <= kUnwakeableSleep.tv_nsec)
    return timeout;
  return &kUnwakeableSleep;
}

void ThreadWaker::signal() {
  if (signalled_.exchange(true, std::memory_order_acq_rel)) return;
  ErrnoGuard errno_guard;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t written = next::write(fd_, &one, sizeof(one));
}

void ThreadWaker::consume() {
  // A peer process may have written the eventfd itself (a transport armed
  // for this thread alone, Transport::arm_for_sleeper): drain it either way.
  signalled_.store(false, std::memory_order_release);
  ErrnoGuard errno_guard;
  uint64_t drained;
  [[maybe_unused]] ssize_t count = next::read(fd_, &drained, sizeof(drained));
}

bool ThreadWaker::renew_after_fork() {
  ErrnoGuard errno_guard;
  signalled_.store(false, std::memory_order_relaxed);
  const int fresh = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  const bool renewed = fresh >= 0 && next::dup3(fresh, fd_, O_CLOEXEC) == fd_;
  if (fresh >= 0) close_descriptor(fresh);
  return renewed;
}

}  // namespace qpsock::stream
