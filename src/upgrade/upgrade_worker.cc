#include "upgrade/upgrade_worker.h"

#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <mutex>

#include "common/log.h"
#include "libc/next_symbols.h"
#include "upgrade/agent_thread.h"

namespace qpsock::upgrade {
namespace {

class UpgradeWorker : public HelperLock {
 public:
  bool queue(std::function<void()> job);
  void run();
  // fork: the child has no worker thread; the jobs queued for it go.
  void forget_after_fork();

 private:
  bool start_locked();

  std::deque<std::function<void()>> jobs_;
  HelperWakeup wakeup_;
  bool running_ = false;
};

UpgradeWorker& worker() { return fork_aware_instance<UpgradeWorker>(); }

bool UpgradeWorker::queue(std::function<void()> job) {
  std::lock_guard lock(mutex_);
  if (!start_locked()) return false;
  jobs_.push_back(std::move(job));
  wakeup_.signal();
  return true;
}

bool UpgradeWorker::start_locked() {
  if (running_) return true;
  if (wakeup_.open() < 0) return false;
  if (const int error = start_agent_thread("qpsock-worker", [] { worker().run(); }); error != 0) {
    QPSOCK_LOG(warn, "cannot start the upgrade worker thread (%d): connections stay on TCP", error);
    wakeup_.close();
    return false;
  }
  running_ = true;
  return true;
}

void UpgradeWorker::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::lock_guard lock(mutex_);
      if (!jobs_.empty()) {
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
    }
    if (job) {
      job();
      continue;
    }
    wakeup_.sleep(-1);
  }
}

void UpgradeWorker::forget_after_fork() {
  jobs_.clear();
  wakeup_.close();
  running_ = false;
}

}  // namespace

bool run_in_upgrade_worker(std::function<void()> job) { return worker().queue(std::move(job)); }

}  // namespace qpsock::upgrade
