// EpollSet over real upgraded connections in one process: a TCP pair on
// loopback whose two Connections have streams (over the loopback transport)
// installed as the handshake installs them, so each direction switches
// mid-stream at its first write. The set is driven directly, as the epoll
// wrappers drive it; the point is that it reports what epoll reports of TCP
// (level, edge, one-shot, EOF, close) and that several threads can wait on
// one set and drain it while a writer feeds it, clean under TSan and ASan.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "readiness/epoll_set.h"
#include "stream/loopback_stream_pair.h"
#include "support/upgraded_pair.h"
#include "upgrade/connection.h"

namespace qpsock::readiness {
namespace {

using testing::make_upgraded_pair;
using testing::UpgradedPair;

ssize_t send_text(upgrade::Connection& connection, int fd, const char* text) {
  iovec piece{const_cast<char*>(text), std::strlen(text)};
  return connection.send(fd, std::span<const iovec>(&piece, 1), MSG_NOSIGNAL);
}

// Reads what is there (non-blocking): the bytes, or "" on EAGAIN.
std::string receive_all(upgrade::Connection& connection, int fd) {
  std::string bytes;
  char buffer[4096];
  for (;;) {
    iovec piece{buffer, sizeof(buffer)};
    const ssize_t got = connection.receive(fd, std::span<const iovec>(&piece, 1), MSG_DONTWAIT);
    if (got <= 0) return bytes;
    bytes.append(buffer, static_cast<size_t>(got));
  }
}

struct EpollSetTest : ::testing::Test {
  void SetUp() override {
    make_upgraded_pair(pair);
    epoll_fd = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
    ASSERT_TRUE(epoll_fd.valid());
    set = std::make_shared<EpollSet>(epoll_fd.get());
  }
  void add_server(uint32_t events, uint64_t data = 42) {
    epoll_event event{};
    event.events = events;
    event.data.u64 = data;
    ASSERT_EQ(set->add(pair.server_fd.get(), event, pair.server, nullptr), 0);
  }
  // Waits up to `milliseconds`; the events reported.
  std::vector<epoll_event> wait(int milliseconds) {
    std::vector<epoll_event> events(8);
    const timespec timeout{milliseconds / 1000, (milliseconds % 1000) * 1000000L};
    const int count = set->wait(events.data(), static_cast<int>(events.size()), &timeout, nullptr);
    events.resize(count < 0 ? 0 : static_cast<size_t>(count));
    return events;
  }

  UpgradedPair pair;
  UniqueFd epoll_fd;
  std::shared_ptr<EpollSet> set;
};

TEST_F(EpollSetTest, LevelTriggeredReportsUntilTheBytesAreRead) {
  add_server(EPOLLIN);
  EXPECT_TRUE(wait(0).empty());
  ASSERT_EQ(send_text(*pair.client, pair.client_fd.get(), "hello"), 5);
  auto events = wait(2000);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data.u64, 42u);
  EXPECT_EQ(events[0].events & EPOLLIN, static_cast<uint32_t>(EPOLLIN));
  EXPECT_EQ(wait(0).size(), 1u) << "level-triggered: still readable";
  EXPECT_EQ(receive_all(*pair.server, pair.server_fd.get()), "hello");
  EXPECT_TRUE(wait(0).empty());
  // Past the switch: bytes now come over the stream, not TCP.
  ASSERT_EQ(send_text(*pair.client, pair.client_fd.get(), "again"), 5);
  ASSERT_EQ(wait(2000).size(), 1u);
  EXPECT_EQ(receive_all(*pair.server, pair.server_fd.get()), "again");
  EXPECT_TRUE(pair.server->receiving_switched());
}

TEST_F(EpollSetTest, EdgeTriggeredReportsOnlyNewActivity) {
  ASSERT_EQ(send_text(*pair.client, pair.client_fd.get(), "switch"), 6);
  add_server(EPOLLIN | EPOLLET);
  ASSERT_EQ(wait(2000).size(), 1u);
  // The switch may be one more edge: the look that takes the binding token
  // (so that it never reads as a byte, nor its segment as an edge) returns
  // the switch header's credit, whose completion a later look sees. After
  // it nothing changes.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  size_t switch_edges = 0;
  for (int look = 0; look < 3; ++look) switch_edges += wait(0).size();
  EXPECT_LE(switch_edges, 1u);
  EXPECT_TRUE(wait(0).empty()) << "edge-triggered: nothing new";
  EXPECT_TRUE(wait(0).empty()) << "edge-triggered: nothing new";
  ASSERT_EQ(send_text(*pair.client, pair.client_fd.get(), "more"), 4);
  ASSERT_EQ(wait(2000).size(), 1u) << "new bytes are a new edge";
  EXPECT_EQ(receive_all(*pair.server, pair.server_fd.get()), "switchmore");
  EXPECT_TRUE(wait(0).empty());
}

TEST_F(EpollSetTest, OneShotReportsOnceUntilRearmed) {
  add_server(EPOLLIN | EPOLLONESHOT, 7);
  ASSERT_EQ(send_text(*pair.client, pair.client_fd.get(), "one"), 3);
  ASSERT_EQ(wait(2000).size(), 1u);
  EXPECT_TRUE(wait(0).empty()) << "one-shot: disabled after its report";
  epoll_event rearm{};
  rearm.events = EPOLLIN | EPOLLONESHOT;
  rearm.data.u64 = 8;
  int result = -1;
  ASSERT_TRUE(set->modify(pair.server_fd.get(), rearm, result));
  ASSERT_EQ(result, 0);
  auto events = wait(2000);
  ASSERT_EQ(events.size(), 1u) << "re-armed while still readable";
  EXPECT_EQ(events[0].data.u64, 8u);
}

TEST_F(EpollSetTest, PeerShutdownIsReadableWithRdhup) {
  ASSERT_EQ(send_text(*pair.client, pair.client_fd.get(), "bye"), 3);
  add_server(EPOLLIN | EPOLLRDHUP);
  ASSERT_EQ(wait(2000).size(), 1u);
  EXPECT_EQ(receive_all(*pair.server, pair.server_fd.get()), "bye");
  ASSERT_EQ(pair.client->shutdown(pair.client_fd.get(), SHUT_WR), 0);
  auto events = wait(2000);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].events & (EPOLLIN | EPOLLRDHUP), static_cast<uint32_t>(EPOLLIN | EPOLLRDHUP));
  EXPECT_EQ(events[0].events & EPOLLHUP, 0u) << "only one direction is shut";
}

TEST_F(EpollSetTest, AClosedFdLeavesTheSet) {
  add_server(EPOLLIN);
  ASSERT_EQ(send_text(*pair.client, pair.client_fd.get(), "x"), 1);
  ASSERT_EQ(wait(2000).size(), 1u);
  set->fd_closing(pair.server_fd.get());
  EXPECT_TRUE(wait(50).empty());
  EXPECT_FALSE(set->active());
}

TEST_F(EpollSetTest, SeveralThreadsWaitOnOneSetWhileAWriterFeedsIt) {
  constexpr int kMessages = 2000;
  add_server(EPOLLIN | EPOLLET);
  std::atomic<int> received{0};
  std::atomic<bool> done{false};
  std::mutex read_mutex;  // as an application serializes reads of one socket
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&] {
      while (!done.load()) {
        auto events = wait(100);
        if (events.empty()) continue;
        std::lock_guard lock(read_mutex);
        received += static_cast<int>(receive_all(*pair.server, pair.server_fd.get()).size());
        if (received.load() >= kMessages) done = true;
      }
    });
  }
  for (int i = 0; i < kMessages; ++i) {
    while (send_text(*pair.client, pair.client_fd.get(), "m") != 1) std::this_thread::yield();
    if (i % 64 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  for (int i = 0; i < 300 && !done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  done = true;
  for (auto& waiter : waiters) waiter.join();
  EXPECT_EQ(received.load(), kMessages) << "an edge was lost: waiters slept through bytes";
}

}  // namespace
}  // namespace qpsock::readiness
