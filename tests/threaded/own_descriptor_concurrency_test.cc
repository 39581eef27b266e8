// keep_own_descriptor from many threads at once: each raise reads the
// application's own limit, never another thread's raise, so the limit ends
// as it began. In a child of its own (EXPECT_EXIT): it changes the limits.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "common/own_descriptor.h"

namespace qpsock {
namespace {

#define REQUIRE(condition) \
  if (!(condition)) _exit(__LINE__ % 200 + 1)

void move_from_many_threads() {
  const rlimit start{64, 4096};
  REQUIRE(setrlimit(RLIMIT_NOFILE, &start) == 0);
  constexpr size_t kThreads = 8, kRounds = 50;
  std::vector<int> kept(kThreads * kRounds, -1);
  std::vector<std::thread> threads;
  for (size_t thread = 0; thread < kThreads; ++thread)
    threads.emplace_back([&kept, thread] {
      for (size_t round = 0; round < kRounds; ++round)
        kept[thread * kRounds + round] = keep_own_descriptor(eventfd(0, EFD_CLOEXEC));
    });
  for (auto& thread : threads) thread.join();
  for (int fd : kept) REQUIRE(fd >= 64);
  rlimit end{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &end) == 0);
  REQUIRE(end.rlim_cur == 64 && end.rlim_max == 4096);
  _exit(0);
}

TEST(OwnDescriptorConcurrency, MovesRestoreTheLimit) {
  EXPECT_EXIT(move_from_many_threads(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace qpsock
