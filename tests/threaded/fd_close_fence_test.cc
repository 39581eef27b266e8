// The application's ways of letting a number go (close, dup2 over it,
// close_range, closefrom) end every number qpsock kept of it before the
// kernel's call (common/kept_fd.h): an upgraded connection leaves the
// registry and no use of its number is held after. A use under way is
// waited for; one of the closing thread's own (a signal handler) is not.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/close_range.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "common/kept_fd.h"
#include "process/process_calls.h"
#include "sockets/socket_lifecycle.h"
#include "support/upgraded_pair.h"
#include "upgrade/connection_registry.h"

namespace qpsock::sockets {
namespace {

// An upgraded pair whose server end is attached at its number, as accept leaves it.
struct AttachedPair {
  AttachedPair() {
    testing::make_upgraded_pair(pair);
    number = pair.server_fd.release();
    upgrade::attach_connection(number, pair.server);
  }
  testing::UpgradedPair pair;
  int number = -1;
};

void expect_let_go(const AttachedPair& attached) {
  EXPECT_EQ(upgrade::find_connection(attached.number), nullptr);
  EXPECT_FALSE(still_kept(attached.pair.server->control()));
  EXPECT_FALSE(FdUse(attached.pair.server->control()));
}

TEST(FdCloseFence, CloseEndsTheKeptNumber) {
  AttachedPair attached;
  ASSERT_TRUE(still_kept(attached.pair.server->control()));
  ASSERT_EQ(sockets::close(attached.number), 0);
  expect_let_go(attached);
}

TEST(FdCloseFence, CloseRangeEndsTheKeptNumbers) {
  AttachedPair first, second;
  const auto [low, high] = std::minmax(first.number, second.number);
  ASSERT_EQ(sockets::close_range(static_cast<unsigned>(low), static_cast<unsigned>(high), 0), 0);
  expect_let_go(first);
  expect_let_go(second);
  EXPECT_EQ(::fcntl(low, F_GETFD), -1) << "the kernel's close_range was not made";
}

TEST(FdCloseFence, CloseRangeCloexecClosesNothing) {
  AttachedPair attached;
  ASSERT_EQ(sockets::close_range(static_cast<unsigned>(attached.number),
                                 static_cast<unsigned>(attached.number), CLOSE_RANGE_CLOEXEC), 0);
  EXPECT_TRUE(still_kept(attached.pair.server->control()));
  EXPECT_NE(upgrade::find_connection(attached.number), nullptr);
  ASSERT_EQ(sockets::close(attached.number), 0);
}

TEST(FdCloseFence, Dup2OverTheNumberEndsIt) {
  AttachedPair attached;
  int other[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, other), 0);
  ASSERT_EQ(sockets::dup2(other[0], attached.number), attached.number);
  expect_let_go(attached);
  for (int fd : {other[0], other[1], attached.number}) ::close(fd);
}

TEST(FdCloseFence, Dup2OfTheSameSocketOntoItsNumberClosesNothing) {
  AttachedPair attached;
  const int other = sockets::dup(attached.number);
  ASSERT_GE(other, 0);
  ASSERT_EQ(sockets::dup2(other, attached.number), attached.number);
  EXPECT_TRUE(still_kept(attached.pair.server->control())) << "a call under way would have lost its number";
  EXPECT_EQ(upgrade::find_connection(attached.number), attached.pair.server);
  ASSERT_EQ(sockets::close(other), 0);
  ASSERT_EQ(sockets::close(attached.number), 0);
  expect_let_go(attached);
}

TEST(FdCloseFence, ACloseWaitsForAUseUnderWay) {
  AttachedPair attached;
  std::atomic<bool> holding{false}, closed{false};
  std::thread user([&] {
    const FdUse use(attached.pair.server->control());
    ASSERT_TRUE(use);
    holding = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_FALSE(closed.load()) << "the number was closed under a use";
  });
  while (!holding) std::this_thread::yield();
  ASSERT_EQ(sockets::close(attached.number), 0);
  closed = true;
  user.join();
  expect_let_go(attached);
}

TEST(FdCloseFence, ACloseDoesNotWaitForTheClosingThreadsOwnUse) {
  AttachedPair attached;
  const FdUse use(attached.pair.server->control());
  ASSERT_TRUE(use);
  // As a signal handler interrupting this thread's use would.
  ASSERT_EQ(sockets::close(attached.number), 0);
  EXPECT_FALSE(still_kept(attached.pair.server->control()));
}

TEST(FdCloseFence, AForkedChildDoesNotWaitForItsParentsOtherThreadsUses) {
  AttachedPair attached;
  std::atomic<bool> holding{false}, done{false};
  std::thread user([&] {
    const FdUse use(attached.pair.server->control());
    holding = true;
    while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  while (!holding) std::this_thread::yield();
  const pid_t child = process::fork();
  if (child == 0) {
    // That thread is not in the child: its use went with it.
    alarm(5);
    _exit(sockets::close(attached.number) == 0 ? 0 : 1);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child's close hung or failed";
  done = true;
  user.join();
  ASSERT_EQ(sockets::close(attached.number), 0);
}

}  // namespace
}  // namespace qpsock::sockets
