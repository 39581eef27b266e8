#include "upgrade/upgrade_worker.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "libc/next_symbols.h"
#include "common/helper_thread.h"
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

// Claims handed over without a lock: a bounded multi-producer queue (each
// cell's sequence says whose turn it is, D. Vyukov's design), drained by the
// worker alone. A producer interrupted between taking its cell and filling it
// holds up only the drain, until it returns.
class ClaimQueue {
 public:
  ClaimQueue() {
    for (size_t index = 0; index < kCapacity; ++index)
      cells_[index].sequence.store(index, std::memory_order_relaxed);
  }
  // Forgets every claim, as if popped, writing only their cells: a forked
  // child's write to each untouched page would copy it (a fork-per-connection
  // server pays that at every connection). Only while no producer or
  // consumer runs (a forked child).
  void drop_all() {
    const uint64_t end = enqueue_at_.load(std::memory_order_relaxed);
    for (uint64_t position = dequeue_at_.load(std::memory_order_relaxed); position != end; ++position)
      cells_[position % kCapacity].sequence.store(position + kCapacity, std::memory_order_relaxed);
    dequeue_at_.store(end, std::memory_order_relaxed);
  }
  // Whether the oldest claim is there to pop (the worker's look before it sleeps).
  bool ready() const {
    // seq_cst, as the push's store: see UpgradeWorker::hand.
    return cells_[dequeue_at_.load(std::memory_order_relaxed) % kCapacity].sequence.load(
               std::memory_order_seq_cst) == dequeue_at_.load(std::memory_order_relaxed) + 1;
  }
  // Whether over half the cells are taken (the worker should drain them now).
  bool filling() const {
    return enqueue_at_.load(std::memory_order_relaxed) - dequeue_at_.load(std::memory_order_relaxed) >
           kCapacity / 2;
  }
  bool push(const ServerClaim& claim) {
    uint64_t position = enqueue_at_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[position % kCapacity];
      const uint64_t sequence = cell.sequence.load(std::memory_order_acquire);
      const auto lag = static_cast<int64_t>(sequence - position);
      if (lag < 0) return false;  // full
      if (lag > 0) {
        position = enqueue_at_.load(std::memory_order_relaxed);
        continue;
      }
      if (enqueue_at_.compare_exchange_weak(position, position + 1, std::memory_order_relaxed)) {
        cell.claim = claim;
        cell.sequence.store(position + 1, std::memory_order_seq_cst);
        return true;
      }
    }
  }
  bool pop(ServerClaim& claim) {
    const uint64_t position = dequeue_at_.load(std::memory_order_relaxed);
    Cell& cell = cells_[position % kCapacity];
    if (cell.sequence.load(std::memory_order_acquire) != position + 1) return false;
    claim = cell.claim;
    cell.sequence.store(position + kCapacity, std::memory_order_release);
    dequeue_at_.store(position + 1, std::memory_order_relaxed);
    return true;
  }

 private:
  static constexpr size_t kCapacity = 1024;
  struct Cell {
    std::atomic<uint64_t> sequence{0};
    ServerClaim claim;
  };
  // The counters first, on the page that the worker's other state and its
  // lock share (what fork touches), the cells after.
  std::atomic<uint64_t> enqueue_at_{0};
  std::atomic<uint64_t> dequeue_at_{0};  // moved by the worker alone
  Cell cells_[kCapacity];
};

// Whether the worker takes claims: read before the worker itself is touched,
// so that a signal handler never constructs it.
std::atomic<bool> claims_taken{false};
std::atomic<void (*)(const ServerClaim&)> claim_intake{nullptr};

class UpgradeWorker : public HelperLock {
 public:
  bool queue(WorkerJob job);
  bool start();
  bool hand(const ServerClaim& claim, Clock::time_point due);
  void run();
  // fork: the child has no worker thread; the jobs queued for it go.
  void forget_after_fork();

 private:
  bool start_locked();
  void take_claims();

  std::vector<WorkerJob> jobs_;
  HelperWakeup wakeup_;
  Clock::time_point wakes_by() const { return Clock::time_point(Clock::duration(wakes_by_.load())); }
  void set_wakes_by(Clock::time_point time) { wakes_by_.store(time.time_since_epoch().count()); }

  // When the worker's sleep ends at the latest (max: it sleeps until
  // signalled; min: it is awake, and takes the claims before it sleeps): a
  // job or claim due no sooner need not wake it. Atomic, for the claims'
  // lock-free hand-over.
  std::atomic<Clock::rep> wakes_by_{Clock::time_point::max().time_since_epoch().count()};
  bool running_ = false;
  // Last: its cells span pages that fork need not touch.
  ClaimQueue claims_;
};

UpgradeWorker& worker() { return fork_aware_instance<UpgradeWorker>(); }

bool UpgradeWorker::queue(WorkerJob job) {
  // Not under the lock: the counts' first use registers fork handlers, and
  // a fork under way holds fork's lock while it waits for ours.
  prepare_attempt_threads();
  std::lock_guard lock(mutex_);
  if (!start_locked()) return false;
  if (job.not_before < wakes_by()) {
    set_wakes_by(job.not_before);
    wakeup_.signal();
  }
  jobs_.push_back(std::move(job));
  std::push_heap(jobs_.begin(), jobs_.end(), DueLater{});
  return true;
}

bool UpgradeWorker::start() {
  prepare_attempt_threads();  // as in queue()
  std::lock_guard lock(mutex_);
  return start_locked();
}

bool UpgradeWorker::start_locked() {
  if (running_) return true;
  if (wakeup_.open() < 0) return false;
  if (const int error = start_helper_thread("qpsock-worker", [] { worker().run(); }); error != 0) {
    QPSOCK_LOG(warn, "cannot start the upgrade worker thread (%d): connections stay on TCP", error);
    wakeup_.close();
    return false;
  }
  running_ = true;
  claims_taken.store(true, std::memory_order_release);
  return true;
}

bool UpgradeWorker::hand(const ServerClaim& claim, Clock::time_point due) {
  // The push's store and this load of wakes_by_, the worker's store of
  // wakes_by_ and its look at the queue before it sleeps, are all seq_cst:
  // one of the two sides sees the other's store.
  if (!claims_.push(claim)) return false;
  // A busy server's claims then cost one wakeup per delay, not one each.
  if (due < wakes_by() || claims_.filling()) wakeup_.signal();
  return true;
}

void UpgradeWorker::take_claims() {
  auto* intake = claim_intake.load(std::memory_order_acquire);
  ServerClaim claim;
  while (intake != nullptr && claims_.pop(claim)) intake(claim);
}

void UpgradeWorker::run() {
  for (;;) {
    take_claims();  // outside the lock: the intake queues jobs
    WorkerJob job;
    int sleep_ms = -1;
    {
      std::lock_guard lock(mutex_);
      const auto now = Clock::now();
      if (!jobs_.empty() && jobs_.front().not_before <= now + kEarlyBy) {
        std::pop_heap(jobs_.begin(), jobs_.end(), DueLater{});
        job = std::move(jobs_.back());
        jobs_.pop_back();
        set_wakes_by(Clock::time_point::min());  // awake: a new job needs no signal
      } else if (!jobs_.empty()) {
        const auto sleep = std::chrono::ceil<std::chrono::milliseconds>(jobs_.front().not_before - now);
        sleep_ms = static_cast<int>(sleep.count());
        set_wakes_by(now + sleep);
      } else {
        set_wakes_by(Clock::time_point::max());
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
    // A claim handed over while wakes_by_ still said awake found no signal
    // needed: it is taken now.
    if (claims_.ready()) continue;
    wakeup_.sleep(sleep_ms);
  }
}

void UpgradeWorker::forget_after_fork() {
  claims_taken.store(false, std::memory_order_relaxed);
  claims_.drop_all();
  jobs_.clear();
  set_wakes_by(Clock::time_point::max());
  wakeup_.close();
  running_ = false;
}

}  // namespace

bool run_in_upgrade_worker(WorkerJob job) { return worker().queue(std::move(job)); }

void set_server_claim_intake(void (*intake)(const ServerClaim& claim)) {
  claim_intake.store(intake, std::memory_order_release);
}

bool start_upgrade_worker() {
  // Called at accepts: once it runs, one load, no lock.
  if (claims_taken.load(std::memory_order_acquire)) return true;
  return worker().start();
}

bool upgrade_worker_running() { return claims_taken.load(std::memory_order_acquire); }

bool hand_claim_to_upgrade_worker(const ServerClaim& claim, Clock::time_point due) {
  if (!claims_taken.load(std::memory_order_acquire)) return false;
  return worker().hand(claim, due);
}

}  // namespace qpsock::upgrade
