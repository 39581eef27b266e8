// A forked child's copy of a connection its parent upgraded: the child's
// calls fail with ECONNRESET and never reach the stream, which stays the
// parent's (docs/upgrade-protocol.md, "fork").
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "stream/loopback_stream_pair.h"
#include "upgrade/connection_registry.h"
#include "upgrade/socket_upgrade.h"

namespace qpsock::upgrade {
namespace {

// What the child found wrong, one bit each (its exit status).
enum ChildFinding : int {
  kSendWentThrough = 1,
  kReceiveWentThrough = 2,
  kShutdownWentThrough = 4,
  kReadableBytesWentThrough = 8,
  kStreamStillThere = 16,
};

int calls_in_forked_child(Connection& connection, int fd) {
  // What the fork wrapper does first in the child (the test is not preloaded).
  connections_after_fork_in_child();
  int findings = 0;
  char byte = 'x';
  const iovec piece{&byte, 1};
  errno = 0;
  if (connection.send(fd, {&piece, 1}, MSG_DONTWAIT) != -1 || errno != ECONNRESET)
    findings |= kSendWentThrough;
  errno = 0;
  if (connection.receive(fd, {&piece, 1}, MSG_DONTWAIT) != -1 || errno != ECONNRESET)
    findings |= kReceiveWentThrough;
  errno = 0;
  if (connection.shutdown(fd, SHUT_WR) != -1 || errno != ECONNRESET) findings |= kShutdownWentThrough;
  int bytes = 0;
  if (connection.readable_bytes(fd, bytes) != -ECONNRESET) findings |= kReadableBytesWentThrough;
  if (connection.stream() != nullptr) findings |= kStreamStillThere;
  return findings;
}

TEST(ConnectionAfterFork, AChildsCallsOnItsParentsUpgradedConnectionFailWithConnectionReset) {
  stream::LoopbackStreamPair pair;
  ASSERT_EQ(stream::make_loopback_stream_pair({}, {}, {}, pair), 0);
  int sockets[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sockets), 0);
  auto connection = std::make_shared<Connection>(config::Role::client);
  connection->install(std::move(pair.first), BindingToken{}, sockets[0], stats::Path::shm);
  attach_connection(sockets[0], connection);

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(calls_in_forked_child(*connection, sockets[0]));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "findings (bits): 1 send, 2 receive, 4 shutdown, "
                                       "8 FIONREAD, 16 the stream was still installed";

  // The parent's connection is as it was: its stream, and the kernel's socket not shut down.
  EXPECT_NE(connection->stream(), nullptr);
  EXPECT_FALSE(connection->inherited_stream());
  EXPECT_EQ(send(sockets[0], "y", 1, MSG_DONTWAIT | MSG_NOSIGNAL), 1) << "the child shut the socket down";
  detach_connection(sockets[0]);
  close(sockets[0]);
  close(sockets[1]);
}

}  // namespace
}  // namespace qpsock::upgrade
