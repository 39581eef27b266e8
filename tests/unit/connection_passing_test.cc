// A socket passed to another process over SCM_RIGHTS: not upgraded yet, it
// stays on TCP for good; upgraded, it is reset (its stream cannot follow);
// a handshake under way is waited for (100 ms if the call may not wait);
// a message carrying no descriptors leaves every connection as it was
// (docs/upgrade-protocol.md, "Passing a socket to another process").
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "stream/loopback_stream_pair.h"
#include "support/loopback_tcp_connection.h"
#include "upgrade/connection_registry.h"
#include "upgrade/socket_upgrade.h"

namespace qpsock::upgrade {
namespace {

// A message carrying `fd` (SCM_RIGHTS), or no descriptor at all.
struct PassingMessage {
  explicit PassingMessage(int fd) {
    message.msg_iov = &piece;
    message.msg_iovlen = 1;
    if (fd < 0) return;
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
  }
  char byte = 'c';
  iovec piece{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
};

// A TCP connection over loopback: ours (the one passed) and the peer's; and
// an AF_UNIX pair to pass it over.
class ConnectionPassing : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(testing::connect_over_loopback(ours, peer));
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, carrier), 0);
  }
  void TearDown() override {
    detach_connection(ours);
    for (int fd : {ours, peer, carrier[0], carrier[1]}) close(fd);
  }
  // What the peer's TCP socket reads now (without waiting long): -errno, or the count.
  ssize_t peer_reads() {
    timeval patience{2, 0};
    setsockopt(peer, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof(patience));
    char byte;
    const ssize_t got = recv(peer, &byte, 1, 0);
    return got < 0 ? -errno : got;
  }
  int ours = -1, peer = -1;
  int carrier[2] = {-1, -1};
};

TEST_F(ConnectionPassing, ASocketPassedBeforeItsUpgradeStaysOnTcp) {
  auto connection = std::make_shared<Connection>(config::Role::server);
  attach_connection(ours, connection);
  errno = 1234;
  connections_before_passing(carrier[0], PassingMessage(ours).message, 0);
  EXPECT_EQ(errno, 1234) << "errno changed";
  EXPECT_EQ(connection->phase(), UpgradePhase::declined);
  // Its first I/O no longer tries an upgrade: the fd goes straight to the kernel.
  EXPECT_EQ(connection_for_io(ours), nullptr);
}

TEST_F(ConnectionPassing, AMessageWithoutDescriptorsLeavesTheConnectionAlone) {
  auto connection = std::make_shared<Connection>(config::Role::server);
  attach_connection(ours, connection);
  connections_before_passing(carrier[0], PassingMessage(-1).message, 0);
  // One carrying another fd (the carrier's other end, which has no Connection).
  connections_before_passing(carrier[0], PassingMessage(carrier[1]).message, 0);
  EXPECT_EQ(connection->phase(), UpgradePhase::offered);
}

TEST_F(ConnectionPassing, AnUpgradedSocketPassedIsResetAndItsPeerHearsIt) {
  stream::LoopbackStreamPair pair;
  ASSERT_EQ(stream::make_loopback_stream_pair({}, {}, {}, pair), 0);
  auto connection = std::make_shared<Connection>(config::Role::client);
  connection->install(std::move(pair.first), BindingToken{}, keep_fd(ours), stats::Path::shm);
  attach_connection(ours, connection);
  connections_before_passing(carrier[0], PassingMessage(ours).message, 0);
  // The peer's kernel got a reset, and the peer's stream is broken.
  EXPECT_EQ(peer_reads(), -ECONNRESET);
  char byte = 'x';
  const iovec piece{&byte, 1};
  EXPECT_LT(pair.second->send({&piece, 1}, MSG_DONTWAIT, stream::Blocking(false)), 0);
}

// A handshake under way is never declined from under its thread (which
// would install its stream all the same): the pass waits for its outcome.
TEST_F(ConnectionPassing, AHandshakeUnderWayIsWaitedFor) {
  auto connection = std::make_shared<Connection>(config::Role::server);
  attach_connection(ours, connection);
  ASSERT_TRUE(connection->begin_negotiation());
  stream::LoopbackStreamPair pair;
  ASSERT_EQ(stream::make_loopback_stream_pair({}, {}, {}, pair), 0);
  std::thread handshake([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    connection->install(std::move(pair.first), BindingToken{}, keep_fd(ours), stats::Path::shm);
  });
  const auto start = std::chrono::steady_clock::now();
  connections_before_passing(carrier[0], PassingMessage(ours).message, 0);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(40));
  handshake.join();
  EXPECT_EQ(connection->phase(), UpgradePhase::established);
  EXPECT_EQ(peer_reads(), -ECONNRESET);
}

// A call that may not wait gives it 100 ms, then resets the connection (an
// EAGAIN would leave an edge-triggered loop waiting on a carrier that is
// writable already); whatever the handshake installs later is dead.
TEST_F(ConnectionPassing, ANonBlockingPassResetsAHandshakeThatDoesNotEndSoon) {
  auto connection = std::make_shared<Connection>(config::Role::server);
  attach_connection(ours, connection);
  ASSERT_TRUE(connection->begin_negotiation());
  const auto start = std::chrono::steady_clock::now();
  connections_before_passing(carrier[0], PassingMessage(ours).message, MSG_DONTWAIT);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(90));
  EXPECT_LT(waited, std::chrono::seconds(1));
  EXPECT_EQ(peer_reads(), -ECONNRESET);
}

}  // namespace
}  // namespace qpsock::upgrade
