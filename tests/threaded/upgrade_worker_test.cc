// The upgrade worker runs a server's attempts their delay after the
// connection's first I/O: a job waits for its time (less the 10 ms by which
// an awake worker takes jobs early), and one due sooner, queued while the
// worker sleeps towards a later one, is not held up by it. A job whose
// connection is gone is dropped. Attempts on the fabric due together run at
// once, up to kMostAttemptsAtOnce, each on its own thread; same-host ones on
// the worker's.
// Claims handed over without a lock reach the intake, in order, on the
// worker's thread.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "upgrade/attempt_threads.h"
#include "upgrade/upgrade_worker.h"

namespace qpsock::upgrade {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

WorkerJob make_job(std::function<void()> run, Clock::time_point not_before = {}) {
  WorkerJob job;
  job.run = std::move(run);
  job.not_before = not_before;
  return job;
}

struct Finished {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::pair<int, Clock::time_point>> jobs;  // which, and when it ran

  std::function<void()> job(int which) {
    return [this, which] {
      std::lock_guard lock(mutex);
      jobs.emplace_back(which, Clock::now());
      changed.notify_all();
    };
  }
  bool wait_for(size_t count, milliseconds limit) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, limit, [&] { return jobs.size() >= count; });
  }
};

TEST(UpgradeWorker, AJobRunsNoSoonerThan10msBeforeItsTime) {
  Finished finished;
  const auto queued = Clock::now();
  ASSERT_TRUE(run_in_upgrade_worker(make_job(finished.job(1), queued + milliseconds{150})));
  ASSERT_TRUE(finished.wait_for(1, milliseconds{10000})) << "the delayed job never ran";
  std::lock_guard lock(finished.mutex);
  EXPECT_GE(finished.jobs[0].second - queued, milliseconds{140});
}

TEST(UpgradeWorker, AJobDueSoonerIsNotHeldUpByALaterOne) {
  Finished finished;
  const auto queued = Clock::now();
  ASSERT_TRUE(run_in_upgrade_worker(make_job(finished.job(1), queued + milliseconds{3000})));
  // Once the worker sleeps towards the first job's time, this one must wake it.
  std::this_thread::sleep_for(milliseconds{100});
  ASSERT_TRUE(run_in_upgrade_worker(make_job(finished.job(2))));
  ASSERT_TRUE(finished.wait_for(1, milliseconds{2000})) << "the job due now waited for the later one";
  {
    std::lock_guard lock(finished.mutex);
    EXPECT_EQ(finished.jobs[0].first, 2);
  }
  ASSERT_TRUE(finished.wait_for(2, milliseconds{10000}));
  std::lock_guard lock(finished.mutex);
  EXPECT_EQ(finished.jobs[1].first, 1);
  EXPECT_GE(finished.jobs[1].second - queued, milliseconds{2990});
}

TEST(UpgradeWorker, ManyJobsQueuedFromManyThreadsAllRunOnce) {
  constexpr int kThreads = 4;
  constexpr int kEach = 50;
  std::atomic<int> ran{0};
  Finished finished;
  std::vector<std::thread> threads;
  for (int thread = 0; thread < kThreads; ++thread) {
    threads.emplace_back([&, thread] {
      for (int each = 0; each < kEach; ++each) {
        // Spread over 0-20 ms, some due at once.
        const auto not_before = Clock::now() + milliseconds{(thread * kEach + each) % 21};
        ASSERT_TRUE(run_in_upgrade_worker(make_job(
            [&] {
              if (ran.fetch_add(1) + 1 == kThreads * kEach) finished.job(0)();
            },
            not_before)));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_TRUE(finished.wait_for(1, milliseconds{20000})) << ran.load() << " jobs ran";
  EXPECT_EQ(ran.load(), kThreads * kEach);
}

TEST(UpgradeWorker, AJobWhoseOwnerIsGoneIsDroppedUnrun) {
  Finished finished;
  auto owner = std::make_shared<int>(0);
  WorkerJob dropped = make_job(finished.job(1), Clock::now() + milliseconds{50});
  dropped.owner = std::weak_ptr<const void>(owner);
  ASSERT_TRUE(run_in_upgrade_worker(std::move(dropped)));
  owner.reset();  // the connection closed within its delay
  auto kept_owner = std::make_shared<int>(0);
  WorkerJob kept = make_job(finished.job(2), Clock::now() + milliseconds{100});
  kept.owner = std::weak_ptr<const void>(kept_owner);
  ASSERT_TRUE(run_in_upgrade_worker(std::move(kept)));
  ASSERT_TRUE(finished.wait_for(1, milliseconds{10000}));
  std::this_thread::sleep_for(milliseconds{100});
  std::lock_guard lock(finished.mutex);
  ASSERT_EQ(finished.jobs.size(), 1u);
  EXPECT_EQ(finished.jobs[0].first, 2);
}

TEST(UpgradeWorker, AJobThatDoesNotWaitOnTheFabricRunsOnTheWorkersThread) {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::thread::id> threads;
  for (int each = 0; each < 3; ++each) {
    WorkerJob job = make_job([&] {
      std::lock_guard lock(mutex);
      threads.push_back(std::this_thread::get_id());
      changed.notify_all();
    });
    job.waits_on_fabric = false;
    ASSERT_TRUE(run_in_upgrade_worker(std::move(job)));
  }
  std::unique_lock lock(mutex);
  ASSERT_TRUE(changed.wait_for(lock, milliseconds{10000}, [&] { return threads.size() == 3; }));
  EXPECT_EQ(threads[0], threads[1]);
  EXPECT_EQ(threads[1], threads[2]);
  EXPECT_NE(threads[0], std::this_thread::get_id());
}

// The threads of earlier tests' attempts give theirs back just after the
// attempts return.
bool no_attempts_under_way() {
  for (int tries = 0; tries < 1000; ++tries) {
    if (attempts_under_way(AttemptKind::server_connect) == 0 &&
        attempts_under_way(AttemptKind::client_accept) == 0)
      return true;
    std::this_thread::sleep_for(milliseconds{10});
  }
  return false;
}

// Jobs that each wait until they are released, counting how many run at once.
struct Gathering {
  std::mutex mutex;
  std::condition_variable changed;
  int running = 0;
  int most_at_once = 0;
  bool released = false;

  void arrive_and_wait() {
    std::unique_lock lock(mutex);
    most_at_once = std::max(most_at_once, ++running);
    changed.notify_all();
    changed.wait_for(lock, milliseconds{10000}, [&] { return released; });
    --running;
    changed.notify_all();
  }
  bool wait_until_running(int count) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, milliseconds{10000}, [&] { return running >= count; });
  }
  void release_and_wait_for_all() {
    std::unique_lock lock(mutex);
    released = true;
    changed.notify_all();
    changed.wait_for(lock, milliseconds{10000}, [&] { return running == 0; });
  }
};

TEST(UpgradeWorker, AttemptsDueTogetherRunAtOnce) {
  // One after another, the first would hold the others up until its peer
  // answered (here: until all of them run, which never came).
  ASSERT_TRUE(no_attempts_under_way());
  Gathering gathering;
  for (int each = 0; each < kMostAttemptsAtOnce; ++each)
    ASSERT_TRUE(run_in_upgrade_worker(make_job([&] { gathering.arrive_and_wait(); })));
  EXPECT_TRUE(gathering.wait_until_running(kMostAttemptsAtOnce))
      << "only " << gathering.running << " attempts ran at once";
  gathering.release_and_wait_for_all();
  EXPECT_EQ(gathering.most_at_once, kMostAttemptsAtOnce);
}

TEST(AttemptThreads, PastTheMostAtOnceTheCallerRunsTheAttemptItself) {
  ASSERT_TRUE(no_attempts_under_way());
  Gathering gathering;
  for (int each = 0; each < kMostAttemptsAtOnce; ++each) {
    std::function<void()> attempt = [&] { gathering.arrive_and_wait(); };
    ASSERT_TRUE(run_attempt_on_own_thread(AttemptKind::client_accept, attempt));
  }
  ASSERT_TRUE(gathering.wait_until_running(kMostAttemptsAtOnce));
  bool ran_here = false;
  std::function<void()> one_more = [&] { ran_here = true; };
  EXPECT_FALSE(run_attempt_on_own_thread(AttemptKind::client_accept, one_more));
  ASSERT_TRUE(one_more) << "a refused attempt must be left to its caller";
  one_more();
  EXPECT_TRUE(ran_here);
  // The other kind has its own threads.
  std::atomic<bool> other_ran{false};
  std::function<void()> other = [&] { other_ran = true; };
  EXPECT_TRUE(run_attempt_on_own_thread(AttemptKind::server_connect, other));
  gathering.release_and_wait_for_all();
  // Once they ended, their threads are free again.
  ASSERT_TRUE(no_attempts_under_way());
  EXPECT_TRUE(other_ran);
  std::function<void()> later = [] {};
  EXPECT_TRUE(run_attempt_on_own_thread(AttemptKind::client_accept, later));
  EXPECT_TRUE(no_attempts_under_way());
}

// Claims handed over (from the application's calls, perhaps a signal
// handler's) reach the intake in order, on the worker's thread, from many
// threads at once; none is lost.
std::mutex intake_mutex;
std::condition_variable intake_changed;
std::vector<ServerClaim> taken_claims;
std::vector<std::thread::id> intake_threads;

void record_claim(const ServerClaim& claim) {
  std::lock_guard lock(intake_mutex);
  taken_claims.push_back(claim);
  intake_threads.push_back(std::this_thread::get_id());
  intake_changed.notify_all();
}

TEST(UpgradeWorker, ClaimsHandedOverReachTheIntakeOnTheWorkersThread) {
  set_server_claim_intake(record_claim);
  ASSERT_TRUE(start_upgrade_worker());
  constexpr int kThreads = 4, kClaims = 200;
  std::vector<std::thread> producers;
  std::atomic<int> refused{0};
  for (int thread = 0; thread < kThreads; ++thread)
    producers.emplace_back([thread, &refused] {
      for (int index = 0; index < kClaims; ++index) {
        ServerClaim claim;
        claim.fd = thread;
        claim.connection_serial = static_cast<uint64_t>(index);
        // The queue holds 1024: a full one says so, and the claim is given again.
        while (!hand_claim_to_upgrade_worker(claim, std::chrono::steady_clock::now())) {
          refused.fetch_add(1);
          std::this_thread::yield();
        }
      }
    });
  for (auto& producer : producers) producer.join();
  std::unique_lock lock(intake_mutex);
  ASSERT_TRUE(intake_changed.wait_for(lock, milliseconds{10000}, [] {
    return taken_claims.size() >= static_cast<size_t>(kThreads * kClaims);
  })) << taken_claims.size() << " claims taken";
  EXPECT_EQ(taken_claims.size(), static_cast<size_t>(kThreads * kClaims));
  // Each producer's claims in the order it gave them.
  std::vector<uint64_t> next(kThreads, 0);
  for (const ServerClaim& claim : taken_claims) {
    ASSERT_GE(claim.fd, 0);
    ASSERT_LT(claim.fd, kThreads);
    EXPECT_EQ(claim.connection_serial, next[static_cast<size_t>(claim.fd)]++);
  }
  for (std::thread::id id : intake_threads) EXPECT_NE(id, std::this_thread::get_id());
}

// A claim due after the worker's next wakeup does not wake it (a busy
// server's claims cost one wakeup per delay), yet is taken at that wakeup,
// even one handed over just as the worker went to sleep.
TEST(UpgradeWorker, ClaimsDueLaterAreTakenAtTheNextWakeup) {
  set_server_claim_intake(record_claim);
  ASSERT_TRUE(start_upgrade_worker());
  {
    std::lock_guard lock(intake_mutex);
    taken_claims.clear();
  }
  constexpr int kClaims = 300;
  const auto start = std::chrono::steady_clock::now();
  for (int index = 0; index < kClaims; ++index) {
    // The worker's next wakeup: a job due shortly (each claim's is later).
    WorkerJob job;
    job.run = [] {};
    job.not_before = std::chrono::steady_clock::now() + milliseconds{5};
    job.waits_on_fabric = false;
    ASSERT_TRUE(run_in_upgrade_worker(std::move(job)));
    ServerClaim claim;
    claim.fd = 7;
    claim.connection_serial = static_cast<uint64_t>(index);
    ASSERT_TRUE(hand_claim_to_upgrade_worker(claim, std::chrono::steady_clock::now() + std::chrono::hours{1}));
    if (index % 50 == 0) std::this_thread::sleep_for(milliseconds{7});
  }
  std::unique_lock lock(intake_mutex);
  ASSERT_TRUE(intake_changed.wait_for(lock, milliseconds{10000}, [] {
    return taken_claims.size() >= static_cast<size_t>(kClaims);
  })) << taken_claims.size() << " claims taken";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds{10});
  for (int index = 0; index < kClaims; ++index)
    EXPECT_EQ(taken_claims[static_cast<size_t>(index)].connection_serial, static_cast<uint64_t>(index));
}

}  // namespace
}  // namespace qpsock::upgrade
