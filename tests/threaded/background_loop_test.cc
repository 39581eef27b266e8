// The background loop: a watched descriptor's events reach its callback
// with the caller's tag, on the loop's thread; a forked child gets a loop
// of its own and the parent's goes on.
#include "common/background_loop.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "support/stream_test_support.h"  // QPSOCK_TESTING_UNDER_TSAN

namespace qpsock {
namespace {

using namespace std::chrono_literals;

std::atomic<uint64_t> last_tag{0};
std::atomic<int> calls{0};
std::atomic<uint32_t> last_events{0};

void record(uint64_t tag, uint32_t events) {
  last_tag = tag;
  last_events = events;
  ++calls;
}

std::atomic<int> other_calls{0};
void record_other(uint64_t /*tag*/, uint32_t /*events*/) { ++other_calls; }

bool eventually(const std::function<bool()>& condition) {
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

struct EventFd {
  int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ~EventFd() { ::close(fd); }
  void signal() const {
    const uint64_t one = 1;
    ASSERT_EQ(::write(fd, &one, sizeof(one)), 8);
  }
};

TEST(BackgroundLoop, AnEventReachesItsCallbackWithItsTag) {
  EventFd first, second;
  const int before = calls.load();
  ASSERT_EQ(watch_in_background(first.fd, EPOLLIN | EPOLLET, &record, 41), 0);
  ASSERT_EQ(watch_in_background(second.fd, EPOLLIN | EPOLLET, &record_other, 42), 0);
  first.signal();
  ASSERT_TRUE(eventually([&] { return calls.load() == before + 1; }));
  EXPECT_EQ(last_tag.load(), 41u);
  EXPECT_NE(last_events.load() & EPOLLIN, 0u);
  EXPECT_EQ(other_calls.load(), 0);
  second.signal();
  ASSERT_TRUE(eventually([&] { return other_calls.load() == 1; }));
  // Edge-triggered: an event not consumed is not reported again.
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(calls.load(), before + 1);
}

TEST(BackgroundLoop, WatchingAgainReArmsAOneShotWatch) {
  EventFd fd;
  const int before = calls.load();
  ASSERT_EQ(watch_in_background(fd.fd, EPOLLIN | EPOLLONESHOT, &record, 7), 0);
  fd.signal();
  ASSERT_TRUE(eventually([&] { return calls.load() == before + 1; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(calls.load(), before + 1);  // readable still, but one shot
  ASSERT_EQ(watch_in_background(fd.fd, EPOLLIN | EPOLLONESHOT, &record, 8), 0);
  ASSERT_TRUE(eventually([&] { return calls.load() == before + 2; }));
  EXPECT_EQ(last_tag.load(), 8u);
}

TEST(BackgroundLoop, ATagBeyondItsBitsIsRefused) {
  EventFd fd;
  EXPECT_EQ(watch_in_background(fd.fd, EPOLLIN, &record, kLargestBackgroundTag + 1), -EINVAL);
  EXPECT_EQ(watch_in_background(-1, EPOLLIN, &record, 1), -EBADF);
}

TEST(BackgroundLoop, AForkedChildHasALoopOfItsOwn) {
#ifdef QPSOCK_TESTING_UNDER_TSAN
  // ThreadSanitizer ends a child that starts a thread after its parent had
  // several (die_after_fork), which is what this test does.
  GTEST_SKIP() << "a thread started after a multithreaded fork";
#endif
  EventFd parents;
  const int before = calls.load();
  ASSERT_EQ(watch_in_background(parents.fd, EPOLLIN | EPOLLET, &record, 5), 0);
  // Fork only once the loop's thread has started and sleeps: a thread still
  // starting holds the sanitizers' allocator lock, which (unlike glibc's
  // malloc) fork does not take, so the child would inherit it held.
  parents.signal();
  ASSERT_TRUE(eventually([&] { return calls.load() == before + 1; }));
  const pid_t child = ::fork();
  if (child == 0) {
    // The parent's watches are not the child's; a new one works.
    EventFd childs;
    const int at_fork = calls.load();
    if (watch_in_background(childs.fd, EPOLLIN | EPOLLET, &record, 6) != 0) ::_exit(2);
    childs.signal();
    if (!eventually([&] { return calls.load() == at_fork + 1 && last_tag.load() == 6; }))
      ::_exit(3);
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  parents.signal();
  ASSERT_TRUE(eventually([&] { return calls.load() == before + 2; }));
  EXPECT_EQ(last_tag.load(), 5u);
}

}  // namespace
}  // namespace qpsock
