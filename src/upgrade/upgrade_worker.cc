#include "upgrade/upgrade_worker.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "libc/next_symbols.h"
#include "upgrade/agent_thread.h"
#include "upgrade/attempt_threads.h"

namespace qpsock::upgrade {
namespace {

using Clock = std::chrono::steady_clock;

// Once awake, the worker also runs the jobs due this much later: the
// connections of a busy server then take one wakeup between them, not one
// each (their delays only bound how soon an attempt may begin).
constexpr std::chrono::milliseconds kEarlyBy{10};

// jobs_ is a heap with the job due first at its front.
struct DueLater {
  bool operator()(const WorkerJob& left, const WorkerJob& right) const {
    return left.not_before > right.not_before;
  }
};

class UpgradeWorker : public HelperLock {
 public:
  bool queue(WorkerJob job);
  void run();
  // fork: the child has no worker thread; the jobs queued for it go.
  void forget_after_fork();

 private:
  bool start_locked();

  std::vector<WorkerJob> jobs_;
  HelperWakeup wakeup_;
  // When the worker's sleep ends at the latest (max: it sleeps until
  // signalled): a job due no sooner need not wake it.
  Clock::time_point wakes_by_ = Clock::time_point::max();
  bool running_ = false;
};

UpgradeWorker& worker() { return fork_aware_instance<UpgradeWorker>(); }

bool UpgradeWorker::queue(WorkerJob job) {
  // Not under the lock: the counts' first use registers fork handlers, and
  // a fork under way holds fork's lock while it waits for ours.
  prepare_attempt_threads();
  std::lock_guard lock(mutex_);
  if (!start_locked()) return false;
  if (job.not_before < wakes_by_) {
    wakes_by_ = job.not_before;
    wakeup_.signal();
  }
  jobs_.push_back(std::move(job));
  std::push_heap(jobs_.begin(), jobs_.end(), DueLater{});
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
    WorkerJob job;
    int sleep_ms = -1;
    {
      std::lock_guard lock(mutex_);
      const auto now = Clock::now();
      if (!jobs_.empty() && jobs_.front().not_before <= now + kEarlyBy) {
        std::pop_heap(jobs_.begin(), jobs_.end(), DueLater{});
        job = std::move(jobs_.back());
        jobs_.pop_back();
        wakes_by_ = Clock::time_point::min();  // awake: a new job needs no signal
      } else if (!jobs_.empty()) {
        const auto sleep = std::chrono::ceil<std::chrono::milliseconds>(jobs_.front().not_before - now);
        sleep_ms = static_cast<int>(sleep.count());
        wakes_by_ = now + sleep;
      } else {
        wakes_by_ = Clock::time_point::max();
      }
    }
    if (job.run) {
      // The connection closed within its delay: nothing to do, no thread.
      if (job.owner && job.owner->expired()) continue;
      // On a thread of its own while few are under way, so that the next
      // connection's attempt need not wait for this one's peer.
      if (!job.waits_on_fabric || !run_attempt_on_own_thread(AttemptKind::server_connect, job.run))
        job.run();
      continue;
    }
    wakeup_.sleep(sleep_ms);
  }
}

void UpgradeWorker::forget_after_fork() {
  jobs_.clear();
  wakes_by_ = Clock::time_point::max();
  wakeup_.close();
  running_ = false;
}

}  // namespace

bool run_in_upgrade_worker(WorkerJob job) { return worker().queue(std::move(job)); }

}  // namespace qpsock::upgrade
