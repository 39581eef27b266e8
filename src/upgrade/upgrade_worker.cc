#include "upgrade/upgrade_worker.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <mutex>
#include <new>

#include "common/log.h"
#include "libc/next_symbols.h"
#include "upgrade/agent_thread.h"

namespace qpsock::upgrade {
namespace {

class UpgradeWorker {
 public:
  bool queue(std::function<void()> job);
  void run();
  // fork: the child has no worker thread; the jobs queued for it go.
  void forget_after_fork();
  void lock() { mutex_.lock(); }
  void unlock() { mutex_.unlock(); }

 private:
  bool start_locked();

  std::mutex mutex_;
  std::deque<std::function<void()>> jobs_;
  int wakeup_fd_ = -1;  // an eventfd, not a condition variable: it survives fork
  bool running_ = false;
};

UpgradeWorker& worker() {
  alignas(UpgradeWorker) static unsigned char storage[sizeof(UpgradeWorker)];
  static UpgradeWorker* instance = [] {
    auto* created = ::new (storage) UpgradeWorker;
    pthread_atfork([] { worker().lock(); }, [] { worker().unlock(); },
                   [] {
                     worker().unlock();
                     worker().forget_after_fork();
                   });
    return created;
  }();
  return *instance;
}

bool UpgradeWorker::queue(std::function<void()> job) {
  std::lock_guard lock(mutex_);
  if (!start_locked()) return false;
  jobs_.push_back(std::move(job));
  const uint64_t one = 1;
  // Cannot fail short of a full counter, which a reader empties constantly.
  (void)!next::write(wakeup_fd_, &one, sizeof(one));
  return true;
}

bool UpgradeWorker::start_locked() {
  if (running_) return true;
  wakeup_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wakeup_fd_ < 0) return false;
  if (const int error = start_agent_thread("qpsock-worker", [] { worker().run(); }); error != 0) {
    QPSOCK_LOG(warn, "cannot start the upgrade worker thread (%d): connections stay on TCP", error);
    next::close(wakeup_fd_);
    wakeup_fd_ = -1;
    return false;
  }
  running_ = true;
  return true;
}

void UpgradeWorker::run() {
  for (;;) {
    std::function<void()> job;
    int wakeup_fd;
    {
      std::lock_guard lock(mutex_);
      wakeup_fd = wakeup_fd_;
      if (!jobs_.empty()) {
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
    }
    if (job) {
      job();
      continue;
    }
    pollfd readable{wakeup_fd, POLLIN, 0};
    next::poll(&readable, 1, -1);
    uint64_t count;
    (void)!next::read(wakeup_fd, &count, sizeof(count));
  }
}

void UpgradeWorker::forget_after_fork() {
  jobs_.clear();
  if (wakeup_fd_ >= 0) next::close(wakeup_fd_);
  wakeup_fd_ = -1;
  running_ = false;
}

}  // namespace

bool run_in_upgrade_worker(std::function<void()> job) { return worker().queue(std::move(job)); }

}  // namespace qpsock::upgrade
