// A socket passed to another process over SCM_RIGHTS: not upgraded yet, it
// stays on TCP for good; upgraded, it is reset (its stream cannot follow);
// a message carrying no descriptors leaves every connection as it was
// (docs/upgrade-protocol.md, "Passing a socket to another process").
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "stream/loopback_stream_pair.h"
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

class ConnectionPassing : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sockets), 0); }
  void TearDown() override {
    detach_connection(sockets[0]);
    close(sockets[0]);
    close(sockets[1]);
  }
  int sockets[2] = {-1, -1};
};

TEST_F(ConnectionPassing, ASocketPassedBeforeItsUpgradeStaysOnTcp) {
  auto connection = std::make_shared<Connection>(config::Role::server);
  attach_connection(sockets[0], connection);
  errno = 1234;
  connections_before_passing(PassingMessage(sockets[0]).message);
  EXPECT_EQ(errno, 1234) << "errno changed";
  EXPECT_EQ(connection->phase(), UpgradePhase::declined);
  // Its first I/O no longer tries an upgrade: the fd goes straight to the kernel.
  EXPECT_EQ(connection_for_io(sockets[0]), nullptr);
}

TEST_F(ConnectionPassing, AMessageWithoutDescriptorsLeavesTheConnectionAlone) {
  auto connection = std::make_shared<Connection>(config::Role::server);
  attach_connection(sockets[0], connection);
  connections_before_passing(PassingMessage(-1).message);
  // One carrying another fd (the socket pair's other end, which has no Connection).
  connections_before_passing(PassingMessage(sockets[1]).message);
  EXPECT_EQ(connection->phase(), UpgradePhase::offered);
}

TEST_F(ConnectionPassing, AnUpgradedSocketPassedIsResetAndItsPeerHearsIt) {
  stream::LoopbackStreamPair pair;
  ASSERT_EQ(stream::make_loopback_stream_pair({}, {}, {}, pair), 0);
  auto connection = std::make_shared<Connection>(config::Role::client);
  connection->install(std::move(pair.first), BindingToken{}, sockets[0], stats::Path::shm);
  attach_connection(sockets[0], connection);
  connections_before_passing(PassingMessage(sockets[0]).message);
  EXPECT_EQ(connection->phase(), UpgradePhase::established);
  char byte = 'x';
  const iovec piece{&byte, 1};
  // Our stream is aborted: writes fail, and the peer's stream is broken.
  EXPECT_LT(connection->stream()->send({&piece, 1}, MSG_DONTWAIT, stream::Blocking(false)), 0);
  EXPECT_LT(pair.second->send({&piece, 1}, MSG_DONTWAIT, stream::Blocking(false)), 0);
}

}  // namespace
}  // namespace qpsock::upgrade
