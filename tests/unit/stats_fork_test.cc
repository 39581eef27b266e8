// fork semantics of the statistics registry (src/stats/registry.h): a child
// shares the rows of the connections it inherited, joins their users, keeps
// counting into them after the parent closed its copy, and makes a file of
// its own for connections it opens itself.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stats/registry.h"
#include "stats_test_support.h"

namespace qpsock::stats {
namespace {

using testing::as_sockaddr;
using testing::ipv4;
using testing::TemporaryDirectory;

// Forks with the registry's hooks around fork; the child runs `child` (at
// most 20 s) and exits with its result. Returns the child's pid (or -1).
template <typename Child>
pid_t fork_child(Registry& registry, Child child) {
  registry.before_fork();
  const pid_t pid = fork();
  if (pid == 0) {
    registry.after_fork_in_child();
    alarm(20);
    _exit(child());
  }
  registry.after_fork_in_parent(pid < 0);
  return pid;
}

// The child's exit status (128 + signal if killed), or -1.
int wait_for(pid_t pid) {
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

template <typename Child>
int run_in_child(Registry& registry, Child child) {
  return wait_for(fork_child(registry, child));
}

// Blocks until one byte arrives on `fd`.
bool await(int fd) {
  char byte;
  return read(fd, &byte, 1) == 1;
}

bool has_user(const format::Slot& slot, pid_t pid) {
  for (const auto& user : slot.users)
    if (user.load() == pid) return true;
  return false;
}

class StatsFork : public ::testing::Test {
 protected:
  Handle open_one() {
    const sockaddr_in address = ipv4("127.0.0.1", 9000);
    return registry_.open(as_sockaddr(address), as_sockaddr(address), Role::server, Path::kernel, "d", "r");
  }
  TemporaryDirectory directory_;
  Registry registry_{directory_.path(), 8};
};

TEST_F(StatsFork, ChildCountsIntoTheInheritedRowAndJoinsItsUsers) {
  const Handle handle = open_one();
  registry_.add_bytes(handle, Direction::sent, Path::kernel, 10);
  int status = run_in_child(registry_, [&] {
    const format::Slot* slot = registry_.find(handle);
    if (slot == nullptr) return 1;
    if (!has_user(*slot, getpid()) || !has_user(*slot, getppid())) return 2;
    if (slot->pending_forks.load() != 0) return 3;
    registry_.add_bytes(handle, Direction::sent, Path::kernel, 5);
    registry_.close(handle);  // the child's copy of the fd
    return 0;
  });
  ASSERT_EQ(status, 0);
  const format::Slot* slot = registry_.find(handle);
  ASSERT_NE(slot, nullptr);
  EXPECT_EQ(slot->bytes[format::kSent][format::kTcp].load(), 15u);
  EXPECT_TRUE(has_user(*slot, getpid()));
  int users = 0;
  for (const auto& user : slot->users) users += user.load() != 0;
  EXPECT_EQ(users, 1);  // the child left when it closed
}

TEST_F(StatsFork, RowOutlivesTheParentsCloseWhileTheChildHoldsIt) {
  const Handle handle = open_one();
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  const pid_t pid = fork_child(registry_, [&] {
    // Wait until the parent has closed its copy (a forking server).
    if (!await(to_child[0])) return 10;
    if (registry_.find(handle) == nullptr) return 11;
    registry_.add_bytes(handle, Direction::received, Path::kernel, 42);
    if (write(to_parent[1], "x", 1) != 1) return 12;
    if (!await(to_child[0])) return 13;
    registry_.close(handle);
    return registry_.find(handle) == nullptr ? 0 : 14;
  });
  ASSERT_GT(pid, 0);
  registry_.close(handle);  // the parent's copy: the child still holds the row
  ASSERT_EQ(write(to_child[1], "x", 1), 1);
  ASSERT_TRUE(await(to_parent[0]));
  const format::Slot* slot = registry_.find(handle);
  ASSERT_NE(slot, nullptr);
  EXPECT_EQ(slot->bytes[format::kReceived][format::kTcp].load(), 42u);
  EXPECT_TRUE(has_user(*slot, pid));
  EXPECT_FALSE(has_user(*slot, getpid()));
  ASSERT_EQ(write(to_child[1], "x", 1), 1);
  EXPECT_EQ(wait_for(pid), 0);
  EXPECT_EQ(registry_.find(handle), nullptr);  // the last user closed: freed
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) close(fd);
}

TEST_F(StatsFork, ChildGetsAFileOfItsOwnForItsOwnConnections) {
  open_one();
  const std::string parent_file = registry_.file_path();
  int status = run_in_child(registry_, [&] {
    if (registry_.file_path()[0] != '\0') return 1;  // not the parent's file
    const Handle own = open_one();
    if (own == 0 || registry_.header() == nullptr) return 2;
    if (registry_.header()->pid != getpid()) return 3;
    if (parent_file == registry_.file_path()) return 4;
    registry_.release_all();  // as at exit: the child's file goes
    return 0;
  });
  EXPECT_EQ(status, 0);
  // The child's file is gone, the parent's stays.
  EXPECT_EQ(directory_.files().size(), 1u);
  EXPECT_EQ(registry_.file_path(), parent_file);
}

TEST_F(StatsFork, ParentExitKeepsItsFileWhileAChildHoldsARow) {
  const Handle handle = open_one();
  int to_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  const pid_t pid = fork_child(registry_, [&] {
    if (!await(to_child[0])) return 10;  // until the parent has "exited"
    registry_.close(handle);
    return 0;
  });
  ASSERT_GT(pid, 0);
  registry_.release_all();  // the parent exits: the child still holds the row
  EXPECT_EQ(directory_.files().size(), 1u);
  ASSERT_NE(registry_.find(handle), nullptr);
  ASSERT_EQ(write(to_child[1], "x", 1), 1);
  EXPECT_EQ(wait_for(pid), 0);
  // The last user let go; qpsock-stat removes the file now that its owner is gone.
  EXPECT_EQ(registry_.find(handle), nullptr);
  close(to_child[0]);
  close(to_child[1]);
}

TEST_F(StatsFork, FailedForkTakesTheMarksBack) {
  const Handle handle = open_one();
  registry_.before_fork();
  EXPECT_EQ(registry_.find(handle)->pending_forks.load(), 1u);
  registry_.after_fork_in_parent(true);
  EXPECT_EQ(registry_.find(handle)->pending_forks.load(), 0u);
  registry_.close(handle);
  EXPECT_EQ(registry_.find(handle), nullptr);
}

}  // namespace
}  // namespace qpsock::stats
