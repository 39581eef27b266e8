// The upgrade worker runs a server's RDMA attempts rdma_upgrade_delay after
// the connection's first I/O: a job waits for its time (less the 10 ms by
// which an awake worker takes jobs early), and one due sooner, queued while
// the worker sleeps towards a later one, is not held up by it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "upgrade/upgrade_worker.h"

namespace qpsock::upgrade {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

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
  ASSERT_TRUE(run_in_upgrade_worker(finished.job(1), queued + milliseconds{150}));
  ASSERT_TRUE(finished.wait_for(1, milliseconds{10000})) << "the delayed job never ran";
  std::lock_guard lock(finished.mutex);
  EXPECT_GE(finished.jobs[0].second - queued, milliseconds{140});
}

TEST(UpgradeWorker, AJobDueSoonerIsNotHeldUpByALaterOne) {
  Finished finished;
  const auto queued = Clock::now();
  ASSERT_TRUE(run_in_upgrade_worker(finished.job(1), queued + milliseconds{3000}));
  // Once the worker sleeps towards the first job's time, this one must wake it.
  std::this_thread::sleep_for(milliseconds{100});
  ASSERT_TRUE(run_in_upgrade_worker(finished.job(2)));
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
        ASSERT_TRUE(run_in_upgrade_worker(
            [&] {
              if (ran.fetch_add(1) + 1 == kThreads * kEach) finished.job(0)();
            },
            not_before));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_TRUE(finished.wait_for(1, milliseconds{20000})) << ran.load() << " jobs ran";
  EXPECT_EQ(ran.load(), kThreads * kEach);
}

}  // namespace
}  // namespace qpsock::upgrade
