// Memory a forked child finds zeroed while the parent keeps its values
// (common/wiped_on_fork.h).
#include "common/wiped_on_fork.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace qpsock {
namespace {

struct Counters {
  std::atomic<uint64_t> forks;
  std::atomic<uint32_t> cursor;
};

// The child's exit status: 0 if `check` held there.
template <typename Check>
int in_child(Check check) {
  const pid_t child = fork();
  if (child == 0) {
    WipedOnFork<Counters>::reset_in_child();
    _exit(check() ? 0 : 1);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(WipedOnFork, AChildStartsFromZerosAndTheParentKeepsItsValues) {
  Counters& counters = WipedOnFork<Counters>::get();
  counters.forks.store(7);
  counters.cursor.store(3);
  EXPECT_EQ(in_child([&] {
              Counters& seen = WipedOnFork<Counters>::get();
              const bool zero = &seen == &counters && seen.forks.load() == 0 && seen.cursor.load() == 0;
              seen.forks.store(99);  // the child's own; the parent never sees it
              return zero;
            }),
            0);
  EXPECT_EQ(counters.forks.load(), 7u);
  EXPECT_EQ(counters.cursor.load(), 3u);
}

TEST(WipedOnFork, TheChildsFirstWriteLeavesEveryPieceAsItIs) {
  prepare_wiped_on_fork_memory();
  auto* piece = static_cast<std::atomic<uint64_t>*>(allocate_wiped_on_fork(8, 8));
  ASSERT_NE(piece, nullptr);
  const pid_t child = fork();
  if (child == 0) {
    piece->store(0x5a5a5a5a5a5a5a5aull);
    touch_wiped_memory_in_child();
    _exit(piece->load() == 0x5a5a5a5a5a5a5a5aull ? 0 : 1);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(WipedOnFork, PiecesAreZeroedAlignedAndDistinct) {
  prepare_wiped_on_fork_memory();
  auto* first = static_cast<unsigned char*>(allocate_wiped_on_fork(24, 8));
  auto* second = static_cast<unsigned char*>(allocate_wiped_on_fork(64, 64));
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 8, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(second) % 64, 0u);
  EXPECT_TRUE(second >= first + 24 || second + 64 <= first);
  for (int index = 0; index < 64; ++index) EXPECT_EQ(second[index], 0);
  // More than a shared page holds: a mapping of its own, wiped as well.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto* large = static_cast<unsigned char*>(allocate_wiped_on_fork(3 * page, 8));
  ASSERT_NE(large, nullptr);
  large[0] = 1;
  first[0] = 1;
  EXPECT_EQ(in_child([&] { return large[0] == 0 && first[0] == 0; }), 0);
  EXPECT_EQ(large[0], 1);
  EXPECT_EQ(first[0], 1);
}

}  // namespace
}  // namespace qpsock
