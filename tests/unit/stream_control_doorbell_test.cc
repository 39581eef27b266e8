// The control connection's doorbells: taken in any number, told apart from
// the peer's FIN and from bytes that are not doorbells (the peer is gone or
// foreign), and never changing errno.
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
  EXPECT_EQ(take_doorbells(ours()), ControlState::quiet);
  EXPECT_EQ(errno, 1234);
}

TEST_F(ControlDoorbellTest, EveryWaitingDoorbellIsTaken) {
  for (int rings = 0; rings < 200; ++rings) ring_doorbell(peers());
  EXPECT_EQ(take_doorbells(ours()), ControlState::quiet);
  char byte;
  EXPECT_EQ(recv(ours(), &byte, 1, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
}

TEST_F(ControlDoorbellTest, DoorbellsThenTheFinAreAnEndOfFile) {
  ring_doorbell(peers());
  shutdown(peers(), SHUT_WR);
  EXPECT_EQ(take_doorbells(ours()), ControlState::end_of_file);
}

TEST_F(ControlDoorbellTest, AByteThatIsNotADoorbellMeansThePeerIsGone) {
  ring_doorbell(peers());
  ASSERT_EQ(send(peers(), "x", 1, 0), 1);
  EXPECT_EQ(take_doorbells(ours()), ControlState::gone);
}

TEST_F(ControlDoorbellTest, RingingAClosedPeerNeitherFailsNorRaisesSigpipe) {
  close(ends_[0]);
  ends_[0] = -1;
  errno = 4321;
  ring_doorbell(peers());  // MSG_NOSIGNAL: the test process would die of SIGPIPE
  EXPECT_EQ(errno, 4321);
}

}  // namespace
}  // namespace qpsock::stream
