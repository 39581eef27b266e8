// The control connection's doorbells: taken in any number, told apart from
// the peer's FIN and from bytes that are not doorbells (the peer is gone or
// foreign), and never changing errno. Whether the connection reads end of
// file: doorbells taken first once they are possible, application bytes
// only peeked at before that.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "stream/control_doorbell.h"

namespace qpsock::stream {
namespace {

class ControlDoorbellTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, ends_), 0); }
  void TearDown() override {
    for (int end : ends_)
      if (end >= 0) close(end);
  }
  int ours() const { return ends_[0]; }
  int peers() const { return ends_[1]; }

  int ends_[2] = {-1, -1};
};

TEST_F(ControlDoorbellTest, NothingWaitingIsQuiet) {
  errno = 1234;
  EXPECT_EQ(take_doorbells(keep_fd(ours())), ControlState::quiet);
  EXPECT_EQ(errno, 1234);
}

TEST_F(ControlDoorbellTest, EveryWaitingDoorbellIsTaken) {
  for (int rings = 0; rings < 200; ++rings) ring_doorbell(keep_fd(peers()));
  EXPECT_EQ(take_doorbells(keep_fd(ours())), ControlState::quiet);
  char byte;
  EXPECT_EQ(recv(ours(), &byte, 1, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
}

TEST_F(ControlDoorbellTest, DoorbellsThenTheFinAreAnEndOfFile) {
  ring_doorbell(keep_fd(peers()));
  shutdown(peers(), SHUT_WR);
  EXPECT_EQ(take_doorbells(keep_fd(ours())), ControlState::end_of_file);
}

TEST_F(ControlDoorbellTest, AByteThatIsNotADoorbellMeansThePeerIsGone) {
  ring_doorbell(keep_fd(peers()));
  ASSERT_EQ(send(peers(), "x", 1, 0), 1);
  EXPECT_EQ(take_doorbells(keep_fd(ours())), ControlState::gone);
}

TEST_F(ControlDoorbellTest, RingingAClosedPeerNeitherFailsNorRaisesSigpipe) {
  close(ends_[0]);
  ends_[0] = -1;
  errno = 4321;
  ring_doorbell(keep_fd(peers()));  // MSG_NOSIGNAL: the test process would die of SIGPIPE
  EXPECT_EQ(errno, 4321);
}

TEST_F(ControlDoorbellTest, BeforeTheSwitchBytesAreOnlyPeekedAt) {
  ASSERT_EQ(send(peers(), "DD", 2, 0), 2);  // the application's, though they look like doorbells
  shutdown(peers(), SHUT_WR);
  EXPECT_FALSE(control_reads_end_of_file(keep_fd(ours()), DoorbellsPossible::no));
  char bytes[2];
  EXPECT_EQ(recv(ours(), bytes, sizeof bytes, MSG_DONTWAIT), 2);  // still there for the reader
  EXPECT_TRUE(control_reads_end_of_file(keep_fd(ours()), DoorbellsPossible::no));
}

TEST_F(ControlDoorbellTest, AfterTheSwitchDoorbellsBeforeTheFinStillReadAsEndOfFile) {
  ring_doorbell(keep_fd(peers()));
  ring_doorbell(keep_fd(peers()));
  EXPECT_FALSE(control_reads_end_of_file(keep_fd(ours()), DoorbellsPossible::yes));
  shutdown(peers(), SHUT_WR);
  errno = 77;
  EXPECT_TRUE(control_reads_end_of_file(keep_fd(ours()), DoorbellsPossible::yes));
  EXPECT_EQ(errno, 77);
}

TEST_F(ControlDoorbellTest, AResetIsNoEndOfFile) {
  ASSERT_EQ(send(ours(), "x", 1, 0), 1);
  close(ends_[1]);  // unread bytes: a UNIX stream socket's peer then reads ECONNRESET
  ends_[1] = -1;
  EXPECT_FALSE(control_reads_end_of_file(keep_fd(ours()), DoorbellsPossible::yes));
}

}  // namespace
}  // namespace qpsock::stream
