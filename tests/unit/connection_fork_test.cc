// A forked child's copy of a connection its parent upgraded: the child's
// calls fail with ECONNRESET and never reach the stream, which stays the
// parent's (docs/upgrade-protocol.md, "fork").
#include <gtest/gtest.h>

#include <sys/epoll.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "process/process_calls.h"
#include "readiness/epoll_set.h"
#include "readiness/upgraded_poll.h"
#include "stream/loopback_stream_pair.h"
#include "upgrade/connection_registry.h"
#include "upgrade/forked_children.h"
#include "upgrade/inherited_streams.h"
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

// A connection upgraded in this process: its stream (over the loopback
// transport) installed on one end of a socket pair, the fd registered.
class ConnectionAfterFork : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(stream::make_loopback_stream_pair({}, {}, {}, pair), 0);
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sockets), 0);
    connection = std::make_shared<Connection>(config::Role::client);
    connection->install(std::move(pair.first), BindingToken{}, keep_fd(sockets[0]), stats::Path::shm);
    attach_connection(sockets[0], connection);
  }
  void TearDown() override {
    detach_connection(sockets[0]);
    close(sockets[0]);
    close(sockets[1]);
  }

  stream::LoopbackStreamPair pair;
  int sockets[2] = {-1, -1};
  std::shared_ptr<Connection> connection;
};

TEST_F(ConnectionAfterFork, AChildsCallsOnItsParentsUpgradedConnectionFailWithConnectionReset) {
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
}

// What the child's epoll set found wrong, one bit each.
enum EpollFinding : int {
  kNotReportedUnusable = 1,
  kRegistrationGoneAfterClose = 2,
};

bool kernel_set_holds(int epoll_fd, int fd) {
  epoll_event event{};
  event.events = EPOLLIN;
  return epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event) != 0 && errno == EEXIST;
}

int epoll_in_forked_child(readiness::EpollSet& set, int epoll_fd, int fd) {
  connections_after_fork_in_child();
  int findings = 0;
  epoll_event events[4];
  const timespec now{0, 0};
  const int count = set.wait(events, 4, &now, nullptr);
  if (count != 1 || (events[0].events & (EPOLLERR | EPOLLHUP)) != (EPOLLERR | EPOLLHUP))
    findings |= kNotReportedUnusable;
  // The child closes its copy: the kernel keeps the parent's registration.
  detach_connection(fd);
  set.fd_closing(fd);
  if (!kernel_set_holds(epoll_fd, fd)) findings |= kRegistrationGoneAfterClose;
  return findings;
}

TEST_F(ConnectionAfterFork, AChildsEpollSetNeitherTouchesNorDropsItsParentsUpgradedConnection) {
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(epoll_fd, 0);
  {
    readiness::EpollSet set(epoll_fd);
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = 7;
    ASSERT_EQ(set.add(sockets[0], event, connection, nullptr), 0);

    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) _exit(epoll_in_forked_child(set, epoll_fd, sockets[0]));
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 0) << "findings (bits): 1 not reported unusable, "
                                         "2 the close took the parent's registration out";
    EXPECT_TRUE(kernel_set_holds(epoll_fd, sockets[0]));
    int result = 0;
    EXPECT_TRUE(set.remove(sockets[0], result));
  }
  close(epoll_fd);
}

// What the child's poll and select found wrong, one bit each.
enum PollFinding : int {
  kPollNotReportedUnusable = 1,
  kPollWaited = 2,
  kSelectNotReportedReadable = 4,
  kSelectWaited = 8,
};

// As a forked receiver does (rsync's): it waits for its parent's upgraded
// socket to become readable. The kernel socket never will; the wait must end
// at once so that the read that follows meets ECONNRESET.
int poll_in_forked_child(int fd) {
  connections_after_fork_in_child();
  int findings = 0;
  const timespec five_seconds{5, 0};
  const auto started = std::chrono::steady_clock::now();
  pollfd entry{fd, POLLIN, 0};
  int result = 0;
  if (!readiness::poll_upgraded(&entry, 1, &five_seconds, nullptr, result) || result != 1 ||
      (entry.revents & (POLLERR | POLLHUP)) != (POLLERR | POLLHUP))
    findings |= kPollNotReportedUnusable;
  if (std::chrono::steady_clock::now() - started > std::chrono::seconds(1)) findings |= kPollWaited;

  const auto select_started = std::chrono::steady_clock::now();
  fd_set readable;
  FD_ZERO(&readable);
  FD_SET(fd, &readable);
  if (!readiness::select_upgraded(fd + 1, &readable, nullptr, nullptr, &five_seconds, nullptr, result) ||
      result != 1 || !FD_ISSET(fd, &readable))
    findings |= kSelectNotReportedReadable;
  if (std::chrono::steady_clock::now() - select_started > std::chrono::seconds(1)) findings |= kSelectWaited;
  return findings;
}

TEST_F(ConnectionAfterFork, AChildsPollAndSelectReportItsParentsUpgradedConnectionFailedAtOnce) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(poll_in_forked_child(sockets[0]));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "findings (bits): 1 poll did not report POLLERR|POLLHUP, "
                                       "2 poll waited, 4 select did not report it readable, "
                                       "8 select waited";
  EXPECT_NE(connection->stream(), nullptr);
}

// posix_spawn, system and popen start a program beside this process: it is
// told every upgraded socket it inherits, and this process keeps its stream.
TEST_F(ConnectionAfterFork, AProgramStartedBesideItIsToldTheSocketAndTheStreamStays) {
  struct stat socket_status {};
  ASSERT_EQ(fstat(sockets[0], &socket_status), 0);
  InheritedStreamsMarker inherited;
  connections_before_spawn(inherited);
  ASSERT_NE(inherited.assignment(), nullptr);
  EXPECT_EQ(std::string(inherited.assignment()),
            std::string(kInheritedStreamsName) + "=" + std::to_string(socket_status.st_ino));
  EXPECT_NE(connection->stream(), nullptr);
  EXPECT_EQ(send(sockets[0], "y", 1, MSG_DONTWAIT | MSG_NOSIGNAL), 1);

  // Nor is one marked close-on-exec left out: posix_spawn's file actions
  // may dup2 it onto the program's stdin or stdout (inetd, CGI), which
  // clears the mark on the copy.
  ASSERT_EQ(fcntl(sockets[0], F_SETFD, FD_CLOEXEC), 0);
  InheritedStreamsMarker marked;
  connections_before_spawn(marked);
  ASSERT_NE(marked.assignment(), nullptr);
  EXPECT_EQ(std::string(marked.assignment()),
            std::string(kInheritedStreamsName) + "=" + std::to_string(socket_status.st_ino));
}

// system() and popen() put the program's environment (naming the upgraded
// socket) in environ for as long as they run. Two threads' calls that end in
// the order they began leave environ as the process had it: the first to end
// restored it and the second then put back the first one's, freed by then.
TEST_F(ConnectionAfterFork, SystemCallsOverlappingInTwoThreadsLeaveTheProcesssEnvironment) {
  char** const before = environ;
  int first_status = -1, second_status = -1;
  std::thread first([&] { first_status = process::system("sleep 0.1"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  std::thread second([&] { second_status = process::system("sleep 0.4"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  EXPECT_NE(environ, before) << "no environment was swapped in: the test proves nothing";
  first.join();
  second.join();
  EXPECT_EQ(first_status, 0);
  EXPECT_EQ(second_status, 0);
  EXPECT_EQ(environ, before);
  EXPECT_NE(getenv("PATH"), nullptr);
}


// A server's connection that has not switched: the child forked after the
// parent's first I/O gets the parent's claim on its upgrade, not a stream.
class ServerConnectionAfterFork : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sockets), 0);
    connection = std::make_shared<Connection>(config::Role::server);
    attach_connection(sockets[0], connection);
  }
  void TearDown() override {
    detach_connection(sockets[0]);
    close(sockets[0]);
    close(sockets[1]);
  }

  // Forks through the fork wrapper itself (the test is not preloaded); the
  // child runs `in_child`, whose findings, one bit each, are its exit status.
  int child_findings(int (*in_child)(Connection&, int)) {
    const pid_t child = process::fork();
    if (child == 0) _exit(in_child(*connection, sockets[0]));
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
  }

  int sockets[2] = {-1, -1};
  std::shared_ptr<Connection> connection;
};

enum KernelPathFinding : int { kNotDeclined = 1, kSendRefused = 2 };

int uses_the_kernel(Connection& connection, int fd) {
  int findings = 0;
  if (connection.phase() != UpgradePhase::declined) findings |= kNotDeclined;
  char byte = 'c';
  const iovec piece{&byte, 1};
  if (connection.send(fd, {&piece, 1}, MSG_DONTWAIT) != 1) findings |= kSendRefused;
  return findings;
}

// sshd without re-exec: its connection's process reads the client's banner
// (the first I/O, which defers the RDMA attempt rdma_upgrade_delay to the
// worker), then forks its sandboxed network child, which does the rest. The
// child must stay on TCP, making no call of qpsock's own, and the parent's
// attempt must decline when due; before, the child found the upgrade
// "under way" and every call failed with ECONNRESET.
TEST_F(ServerConnectionAfterFork, AChildForkedWhileTheParentsAttemptWaitsInTheWorkerStaysOnTcp) {
  ASSERT_TRUE(connection->claim_server_attempt());
  EXPECT_FALSE(connection->forked_since_claimed());
  EXPECT_EQ(child_findings(uses_the_kernel), 0)
      << "findings (bits): 1 not declined, 2 its send did not reach the kernel";
  char byte = 0;
  EXPECT_EQ(recv(sockets[1], &byte, 1, MSG_DONTWAIT), 1);
  EXPECT_EQ(byte, 'c');
  EXPECT_TRUE(connection->forked_since_claimed()) << "the parent would go on to upgrade";
  EXPECT_TRUE(declined_for_a_fork_since_claimed(*connection, sockets[0]));
  EXPECT_EQ(connection->phase(), UpgradePhase::declined);
}

// system() starts a shell that holds the socket without a fork qpsock sees.
TEST_F(ServerConnectionAfterFork, ASystemCallAfterTheClaimCountsAsAFork) {
  ASSERT_TRUE(connection->claim_server_attempt());
  ASSERT_EQ(process::system("true"), 0);
  EXPECT_TRUE(connection->forked_since_claimed());
}

// A fork under way in another thread when the claim is made may already
// have copied the claim into its child, past the fork's own look.
TEST_F(ServerConnectionAfterFork, AClaimMadeWhileAForkIsUnderWayNotesTheFork) {
  fork_starting();
  const bool claimed = connection->claim_server_attempt();
  fork_finished(-1);
  ASSERT_TRUE(claimed);
  EXPECT_TRUE(connection->forked_since_claimed());
}

TEST_F(ServerConnectionAfterFork, AClaimWithNoForkAroundItIsNotMarked) {
  ASSERT_TRUE(connection->claim_server_attempt());
  EXPECT_FALSE(connection->claim_server_attempt()) << "claimed twice";
  EXPECT_FALSE(connection->forked_since_claimed());
  EXPECT_FALSE(declined_for_a_fork_since_claimed(*connection, sockets[0]));
  EXPECT_TRUE(connection->begin_negotiation());
}

enum OwnAttemptFinding : int { kNotOffered = 1, kCannotClaim = 2, kClaimSeesAFork = 4 };

int may_claim(Connection& connection, int) {
  int findings = 0;
  if (connection.phase() != UpgradePhase::offered) findings |= kNotOffered;
  if (!connection.claim_server_attempt()) findings |= kCannotClaim;
  // The child's own fork counts start afresh: its parent's fork is not its.
  if (connection.forked_since_claimed()) findings |= kClaimSeesAFork;
  return findings;
}

// socat's fork per connection: the parent accepts and forks at once; the
// child's first I/O is the first of all, and the upgrade is the child's.
TEST_F(ServerConnectionAfterFork, AChildForkedBeforeAnyIoMakesTheAttemptItself) {
  EXPECT_EQ(child_findings(may_claim), 0)
      << "findings (bits): 1 not offered, 2 could not claim, 4 its claim counted its parent's fork";
  EXPECT_FALSE(connection->forked_since_claimed());
}

}  // namespace
}  // namespace qpsock::upgrade
