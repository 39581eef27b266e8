// A stream installed by the verbs handshake whose peer gives up its side
// before its Hello comes (its accept timed out after our connect was
// established, its process ended): the connection stays on TCP, every byte
// intact both ways, and qpsock-stat no longer says "upgraded".
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "readiness/upgraded_poll.h"
#include "stats/connection_stats.h"
#include "stream/loopback_stream_pair.h"
#include "support/stream_test_support.h"
#include "upgrade/connection_registry.h"
#include "upgrade/handshake_messages.h"

namespace qpsock::upgrade {
namespace {

std::string reason_of(stats::Handle handle) {
  const stats::format::Slot* slot = stats::process_registry().find(handle);
  return slot == nullptr ? std::string("(no row)") : std::string(slot->reason);
}

class UnswitchedStream : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(stream::make_loopback_stream_pair({}, {}, {}, pair), 0);
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sockets), 0);
    connection = std::make_shared<Connection>(config::Role::server);
    sockaddr_in local{}, peer{};
    local.sin_family = peer.sin_family = AF_INET;
    handle = stats::open_connection(reinterpret_cast<const sockaddr*>(&local),
                                    reinterpret_cast<const sockaddr*>(&peer), stats::Role::server,
                                    stats::Path::pending, "rdma", "negotiating");
    connection->attach_statistics(handle);
    ASSERT_EQ(connection->install_announced(std::move(pair.first), keep_fd(sockets[0]), stats::Path::rdma), 0);
    attach_connection(sockets[0], connection);
  }
  void TearDown() override {
    detach_connection(sockets[0]);
    close(sockets[0]);
    close(sockets[1]);
    stats::process_registry().close(handle);
  }

  // `bytes` of a pattern from the peer's TCP end, read back through the
  // connection; and the same the other way. Both must arrive intact.
  void exchange_over_tcp(size_t bytes) {
    std::vector<char> sent(bytes);
    stream::testing::fill_pattern(7, 0, {reinterpret_cast<uint8_t*>(sent.data()), bytes});
    ASSERT_EQ(write(sockets[1], sent.data(), sent.size()), static_cast<ssize_t>(sent.size()));
    std::vector<char> got(bytes);
    size_t done = 0;
    while (done < bytes) {
      iovec piece{got.data() + done, bytes - done};
      const ssize_t n = connection->receive(sockets[0], {&piece, 1}, 0);
      ASSERT_GT(n, 0) << strerror(errno);
      done += static_cast<size_t>(n);
    }
    EXPECT_EQ(got, sent);
    iovec back{const_cast<char*>(sent.data()), sent.size()};
    ASSERT_EQ(connection->send(sockets[0], {&back, 1}, 0), static_cast<ssize_t>(bytes));
    std::vector<char> returned(bytes);
    ASSERT_EQ(recv(sockets[1], returned.data(), bytes, MSG_WAITALL), static_cast<ssize_t>(bytes));
    EXPECT_EQ(returned, sent);
  }

  stream::LoopbackStreamPair pair;
  int sockets[2] = {-1, -1};
  std::shared_ptr<Connection> connection;
  stats::Handle handle = 0;
};

TEST_F(UnswitchedStream, PeerLeavingBeforeItsHelloLeavesTheConnectionOnTcp) {
  if (handle == 0) GTEST_SKIP() << "no statistics file here";
  EXPECT_EQ(stats::process_registry().path(handle), stats::Path::rdma);
  pair.first_transport->peer_leaves();
  exchange_over_tcp(64 << 10);
  EXPECT_FALSE(connection->switched());
  EXPECT_EQ(stats::process_registry().path(handle), stats::Path::kernel);
  EXPECT_EQ(reason_of(handle), "the peer gave up the RDMA upgrade before the switch");
  // Later calls stay on TCP, and attaching the statistics again (the socket
  // layer may do it after the upgrade) does not bring "upgraded" back.
  exchange_over_tcp(1000);
  connection->attach_statistics(handle);
  EXPECT_EQ(stats::process_registry().path(handle), stats::Path::kernel);
}

TEST_F(UnswitchedStream, PeerHelloThatLandedBeforeTheBreakIsTaken) {
  if (handle == 0) GTEST_SKIP() << "no statistics file here";
  // The peer installed and said so before its end went: its Hello is ours
  // to take, and the upgrade is not given up on account of the break.
  Hello hello{};
  hello.magic = kHelloMagic;
  hello.version = kProtocolVersion;
  hello.accepted = 1;
  iovec piece{&hello, sizeof(hello)};
  ASSERT_EQ(pair.second->send({&piece, 1}, 0, stream::Blocking(false)),
            static_cast<ssize_t>(sizeof(hello)));
  pair.first_transport->peer_leaves();
  int readable = -1;
  ASSERT_EQ(connection->readable_bytes(sockets[0], readable), 0);
  EXPECT_EQ(readable, 0);
  EXPECT_EQ(stats::process_registry().path(handle), stats::Path::rdma);
}

double thread_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

TEST_F(UnswitchedStream, PollOnAConnectionWhoseStreamBrokeBeforeTheSwitchSleeps) {
  pair.first_transport->peer_leaves();
  exchange_over_tcp(1000);  // the stream breaks, with no Hello: given up
  ASSERT_TRUE(connection->stream()->broken());
  // Over verbs, the error state's completions can leave a wakeup on the
  // completion channel that a broken stream, which polls no more, never
  // takes: the wait handle stays readable. (The loopback's is an eventfd.)
  const uint64_t one = 1;
  ASSERT_EQ(write(connection->stream()->transport_wait_handle(), &one, sizeof(one)),
            static_cast<ssize_t>(sizeof(one)));
  pollfd entry{sockets[0], POLLIN, 0};
  const timespec a_while{0, 300'000'000};
  int result = -1;
  const double cpu_before = thread_cpu_seconds();
  ASSERT_TRUE(readiness::poll_upgraded(&entry, 1, &a_while, nullptr, result));
  const double cpu_used = thread_cpu_seconds() - cpu_before;
  EXPECT_EQ(result, 0) << "revents " << entry.revents;
  // Woken by it at every turn, poll would spin for all of the 300 ms.
  EXPECT_LT(cpu_used, 0.1) << "poll spun on the broken stream's wait handle";
  // Bytes the peer then sends over TCP wake it, and are read intact.
  std::thread peer([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const char byte = 'z';
    ASSERT_EQ(write(sockets[1], &byte, 1), 1);
  });
  const timespec long_enough{10, 0};
  ASSERT_TRUE(readiness::poll_upgraded(&entry, 1, &long_enough, nullptr, result));
  peer.join();
  EXPECT_EQ(result, 1);
  EXPECT_NE(entry.revents & POLLIN, 0);
  char byte = 0;
  iovec piece{&byte, 1};
  EXPECT_EQ(connection->receive(sockets[0], {&piece, 1}, 0), 1);
  EXPECT_EQ(byte, 'z');
}

}  // namespace
}  // namespace qpsock::upgrade
