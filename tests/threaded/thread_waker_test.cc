// Thread wakers (stream/thread_waker.h): one per sleeping thread, drained
// after its sleep; a sleep nested in another of the same thread gets none;
// a waker a stream still lists is not handed to the next thread; a forked
// child's wakers are not its parent's.
#include "stream/thread_waker.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "stream/wake_signal.h"

namespace qpsock::stream {
namespace {

bool readable(int fd) {
  pollfd watched{fd, POLLIN, 0};
  return ::poll(&watched, 1, 0) == 1;
}

TEST(ThreadWaker, ASignalWakesTheSleeperUntilItIsConsumed) {
  WakeSignal signal;
  ThreadSleep sleep;
  ASSERT_NE(sleep.waker(), nullptr);
  signal.add_sleeper(sleep.waker());
  signal.notify();
  signal.notify();  // once until consumed
  EXPECT_TRUE(readable(sleep.fd()));
  signal.remove_sleeper(sleep.waker());
  sleep.consume();
  EXPECT_FALSE(readable(sleep.fd()));
  signal.notify();  // no longer listed
  EXPECT_FALSE(readable(sleep.fd()));
}

TEST(ThreadWaker, ASleepNestedInAnotherOfTheThreadGetsNone) {
  ThreadSleep outer;
  ASSERT_NE(outer.waker(), nullptr);
  {
    ThreadSleep inner;  // as a signal handler's blocking call would
    EXPECT_EQ(inner.waker(), nullptr);
    EXPECT_EQ(inner.fd(), -1);
  }
  ThreadWaker* const mine = outer.waker();
  ThreadWaker* later = nullptr;
  std::thread([&] {
    ThreadSleep other;
    later = other.waker();
  }).join();
  EXPECT_NE(later, mine);  // another thread, another waker
}

TEST(ThreadWaker, AWakerAStreamStillListsIsNotHandedOn) {
  WakeSignal signal;
  ThreadWaker* left_listed = nullptr;
  // A thread that ends still listed, as one cancelled in its poll.
  std::thread([&] {
    ThreadSleep sleep;
    left_listed = sleep.waker();
    signal.add_sleeper(left_listed);
  }).join();
  ASSERT_NE(left_listed, nullptr);
  ThreadWaker* next = nullptr;
  std::thread([&] {
    ThreadSleep sleep;
    next = sleep.waker();
  }).join();
  EXPECT_NE(next, left_listed);
  signal.notify();  // writes to the orphan: harmless
  // A waker given back unlisted is reused.
  ThreadWaker* again = nullptr;
  std::thread([&] {
    ThreadSleep sleep;
    again = sleep.waker();
  }).join();
  EXPECT_EQ(again, next);
}

TEST(ThreadWaker, AForkedChildsWakerIsNotItsParents) {
  int parents_fd = -1;
  {
    ThreadSleep sleep;
    ASSERT_NE(sleep.waker(), nullptr);
    parents_fd = sleep.fd();
  }
  const pid_t child = ::fork();
  if (child == 0) {
    ThreadSleep sleep;
    if (sleep.fd() != parents_fd) ::_exit(2);  // the same number, renewed
    WakeSignal signal;
    signal.add_sleeper(sleep.waker());
    signal.notify();
    if (!readable(sleep.fd())) ::_exit(3);
    ::_exit(0);  // leaves its eventfd signalled
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(readable(parents_fd));  // the child's signal is not ours
}

}  // namespace
}  // namespace qpsock::stream
