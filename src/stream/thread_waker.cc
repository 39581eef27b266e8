#include "stream/thread_waker.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <deque>
#include <mutex>
#include <vector>

#include "common/errno_guard.h"
#include "common/fork_aware_instance.h"
#include "common/own_descriptor.h"
#include "libc/next_symbols.h"

namespace qpsock::stream {
namespace {

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
  // The child keeps its parent's wakers: their descriptors came along.
  void forget_after_fork() {}

 private:
  std::deque<ThreadWaker> made_;  // never moves what it holds
  std::vector<ThreadWaker*> idle_;
};

// The thread's waker: a plain pointer, still readable in a program's exit
// handlers after the thread's destructors ran (a new waker is then made).
thread_local ThreadWaker* this_threads_waker = nullptr;

// Gives the waker back when the thread ends.
struct WakerReturn {
  ~WakerReturn() {
    if (this_threads_waker != nullptr) fork_aware_instance<Wakers>().give_back(this_threads_waker);
    this_threads_waker = nullptr;
  }
};

}  // namespace

ThreadWaker* ThreadWaker::of_this_thread() {
  if (this_threads_waker != nullptr) [[likely]]
    return this_threads_waker;
  thread_local WakerReturn on_thread_end;
  (void)on_thread_end;
  this_threads_waker = fork_aware_instance<Wakers>().take();
  return this_threads_waker;
}

void ThreadWaker::signal() {
  if (signalled_.exchange(true, std::memory_order_acq_rel)) return;
  ErrnoGuard errno_guard;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t written = next::write(fd_, &one, sizeof(one));
}

void ThreadWaker::consume() {
  if (!signalled_.exchange(false, std::memory_order_acq_rel)) return;
  ErrnoGuard errno_guard;
  uint64_t drained;
  [[maybe_unused]] ssize_t count = next::read(fd_, &drained, sizeof(drained));
}

}  // namespace qpsock::stream
