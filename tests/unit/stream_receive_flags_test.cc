// Receive semantics the socket layer relies on: MSG_PEEK, MSG_WAITALL,
// end-of-stream after every byte, shutdown of either direction, readiness
// flags as tcp_poll reports them, close with unread data, EINTR, and the
// control channel hook.
#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support/stream_test_support.h"

namespace qpsock::stream {
namespace {

using namespace std::chrono_literals;
using testing::fill_pattern;
using testing::first_mismatch;
using testing::receive_bytes;
using testing::send_bytes;
using testing::small_settings;
using testing::Watchdog;

std::span<const uint8_t> text(const char* value) {
  return {reinterpret_cast<const uint8_t*>(value), std::strlen(value)};
}

std::string as_text(const std::vector<uint8_t>& bytes, ssize_t count) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), count > 0 ? count : 0);
}

void ignore_signal(int) {}

// SIGUSR1 interrupts a blocking call (no SA_RESTART).
void install_interrupting_handler() {
  struct sigaction action {};
  action.sa_handler = ignore_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;
  sigaction(SIGUSR1, &action, nullptr);
}

class StreamReceiveFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(make_loopback_stream_pair({}, small_settings(), small_settings(), pair_), 0);
  }
  Stream& writer() { return *pair_.first; }
  Stream& reader() { return *pair_.second; }

  LoopbackStreamPair pair_;
};

TEST_F(StreamReceiveFlagsTest, PeekDoesNotConsumeAndCrossesRecords) {
  ASSERT_EQ(send_bytes(writer(), text("hello"), 0, false), 5);
  ASSERT_EQ(send_bytes(writer(), text("world"), 0, false), 5);
  std::vector<uint8_t> buffer(64);
  ASSERT_EQ(receive_bytes(reader(), buffer, MSG_PEEK, false), 10);
  EXPECT_EQ(as_text(buffer, 10), "helloworld");
  EXPECT_EQ(reader().readable_bytes(), 10u);
  ASSERT_EQ(receive_bytes(reader(), {buffer.data(), 3}, 0, false), 3);
  EXPECT_EQ(as_text(buffer, 3), "hel");
  // From the middle of a record, over the next one.
  ASSERT_EQ(receive_bytes(reader(), {buffer.data(), 5}, MSG_PEEK, false), 5);
  EXPECT_EQ(as_text(buffer, 5), "lowor");
  ASSERT_EQ(receive_bytes(reader(), buffer, 0, false), 7);
  EXPECT_EQ(as_text(buffer, 7), "loworld");
  EXPECT_EQ(receive_bytes(reader(), buffer, MSG_PEEK, false), -EAGAIN);
}

TEST_F(StreamReceiveFlagsTest, PeekWithWaitAllWaitsForEnoughBytes) {
  Watchdog watchdog(30s);
  std::thread sender([&] {
    for (int piece = 0; piece < 4; ++piece) {
      std::this_thread::sleep_for(5ms);
      ASSERT_EQ(send_bytes(writer(), text("abcd")), 4);
    }
  });
  std::vector<uint8_t> buffer(16);
  ASSERT_EQ(receive_bytes(reader(), buffer, MSG_PEEK | MSG_WAITALL), 16);
  EXPECT_EQ(as_text(buffer, 16), "abcdabcdabcdabcd");
  sender.join();
  EXPECT_EQ(reader().readable_bytes(), 16u);
}

TEST_F(StreamReceiveFlagsTest, WaitAllCollectsManyWrites) {
  Watchdog watchdog(30s);
  const size_t total = 200 << 10;
  std::vector<uint8_t> data(total);
  fill_pattern(1, 0, data);
  std::thread sender([&] {
    for (size_t sent = 0; sent < total; sent += 10000) {
      std::this_thread::sleep_for(1ms);
      const size_t size = std::min<size_t>(10000, total - sent);
      ASSERT_EQ(send_bytes(writer(), {data.data() + sent, size}), static_cast<ssize_t>(size));
    }
  });
  std::vector<uint8_t> in(total);
  ASSERT_EQ(receive_bytes(reader(), in, MSG_WAITALL), static_cast<ssize_t>(total));
  sender.join();
  EXPECT_EQ(first_mismatch(1, 0, in), -1);
}

TEST_F(StreamReceiveFlagsTest, WithoutWaitAllABlockingReadReturnsWhatIsThere) {
  ASSERT_EQ(send_bytes(writer(), text("abc"), 0, false), 3);
  std::vector<uint8_t> buffer(100);
  EXPECT_EQ(receive_bytes(reader(), buffer), 3);
}

TEST_F(StreamReceiveFlagsTest, ReceiveLowWaterHoldsReadinessAndBlockingReads) {
  Watchdog watchdog(30s);
  reader().set_receive_low_water(100);
  ASSERT_EQ(send_bytes(writer(), std::vector<uint8_t>(50, 'a'), 0, false), 50);
  EXPECT_EQ(reader().readiness() & POLLIN, 0) << "50 bytes are below SO_RCVLOWAT";
  std::vector<uint8_t> small(10);
  EXPECT_EQ(receive_bytes(reader(), small, MSG_DONTWAIT), 10) << "a non-blocking read takes what is there";
  std::thread sender([&] {
    std::this_thread::sleep_for(50ms);
    ASSERT_EQ(send_bytes(writer(), std::vector<uint8_t>(60, 'b'), 0, false), 60);
  });
  std::vector<uint8_t> buffer(1000);
  EXPECT_EQ(receive_bytes(reader(), buffer), 100) << "a blocking read waits for the low-water mark";
  sender.join();
  ASSERT_EQ(send_bytes(writer(), std::vector<uint8_t>(5, 'c'), 0, false), 5);
  std::vector<uint8_t> five(5);
  EXPECT_EQ(receive_bytes(reader(), five), 5) << "a read asking for less than the mark needs only that";
  ASSERT_EQ(writer().shutdown_write(), 0);
  EXPECT_NE(reader().readiness() & POLLIN, 0) << "end of stream is readable whatever the mark";
  EXPECT_EQ(receive_bytes(reader(), buffer), 0);
}

TEST_F(StreamReceiveFlagsTest, DataToAPeerThatShutBothDirectionsResetsAsTcpDoes) {
  Watchdog watchdog(30s);
  ASSERT_EQ(reader().shutdown_write(), 0);
  ASSERT_EQ(reader().shutdown_read(), 0);
  std::vector<uint8_t> buffer(100);
  EXPECT_EQ(receive_bytes(writer(), buffer), 0) << "the peer's end of stream";
  EXPECT_EQ(send_bytes(writer(), std::vector<uint8_t>(100, 'x'), 0, false), 100)
      << "TCP accepts the write its peer answers with a reset";
  EXPECT_EQ(send_bytes(writer(), std::vector<uint8_t>(10, 'y'), 0, false), -EPIPE);
  EXPECT_EQ(receive_bytes(reader(), buffer), -ECONNRESET) << "the reset reaches the reader that shut down";
  EXPECT_EQ(receive_bytes(reader(), buffer), 0);
}

TEST_F(StreamReceiveFlagsTest, EndOfStreamComesAfterEveryByte) {
  ASSERT_EQ(send_bytes(writer(), text("one"), 0, false), 3);
  ASSERT_EQ(send_bytes(writer(), text("two"), 0, false), 3);
  ASSERT_EQ(writer().shutdown_write(), 0);
  EXPECT_EQ(send_bytes(writer(), text("late"), 0, false), -EPIPE);
  EXPECT_NE(reader().readiness() & POLLRDHUP, 0);
  std::vector<uint8_t> buffer(100);
  ASSERT_EQ(receive_bytes(reader(), buffer, MSG_WAITALL), 6);
  EXPECT_EQ(as_text(buffer, 6), "onetwo");
  EXPECT_EQ(receive_bytes(reader(), buffer), 0);
  EXPECT_EQ(receive_bytes(reader(), buffer, 0, false), 0);
  // The other direction still works.
  ASSERT_EQ(send_bytes(reader(), text("back"), 0, false), 4);
  EXPECT_EQ(receive_bytes(writer(), buffer, 0, false), 4);
}

TEST_F(StreamReceiveFlagsTest, AReaderBlockedForDataSeesEndOfStream) {
  Watchdog watchdog(30s);
  std::thread closer([&] {
    std::this_thread::sleep_for(20ms);
    ASSERT_EQ(writer().shutdown_write(), 0);
  });
  std::vector<uint8_t> buffer(10);
  EXPECT_EQ(receive_bytes(reader(), buffer), 0);
  closer.join();
}

TEST_F(StreamReceiveFlagsTest, ShutdownReadEndsReadsAndWakesABlockedReader) {
  Watchdog watchdog(30s);
  ASSERT_EQ(send_bytes(writer(), text("queued"), 0, false), 6);
  ASSERT_EQ(reader().shutdown_read(), 0);
  std::vector<uint8_t> buffer(100);
  // Queued data is still read, then EOF instead of waiting.
  EXPECT_EQ(receive_bytes(reader(), buffer), 6);
  EXPECT_EQ(receive_bytes(reader(), buffer), 0);

  std::thread shutter([&] {
    std::this_thread::sleep_for(20ms);
    writer().shutdown_read();
  });
  EXPECT_EQ(receive_bytes(writer(), buffer), 0);
  shutter.join();
}

TEST_F(StreamReceiveFlagsTest, ReadinessFollowsTcpPoll) {
  EXPECT_EQ(writer().readiness(), POLLOUT | POLLWRNORM);
  ASSERT_EQ(send_bytes(writer(), text("x"), 0, false), 1);
  EXPECT_EQ(reader().readiness(), POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM);
  ASSERT_EQ(writer().shutdown_write(), 0);
  EXPECT_EQ(reader().readiness(), POLLIN | POLLRDNORM | POLLRDHUP | POLLOUT | POLLWRNORM);
  EXPECT_EQ(writer().readiness(), POLLOUT | POLLWRNORM);
  ASSERT_EQ(reader().shutdown_write(), 0);
  EXPECT_EQ(reader().readiness(), POLLIN | POLLRDNORM | POLLRDHUP | POLLOUT | POLLWRNORM | POLLHUP);
  EXPECT_EQ(writer().readiness(), POLLIN | POLLRDNORM | POLLRDHUP | POLLOUT | POLLWRNORM | POLLHUP);
}

TEST_F(StreamReceiveFlagsTest, CloseWithUnreadBytesResetsAsTcpDoes) {
  ASSERT_EQ(send_bytes(reader(), text("unread!"), 0, false), 7);
  ASSERT_EQ(send_bytes(writer(), text("sent"), 0, false), 4);
  ASSERT_EQ(send_bytes(writer(), text("corked"), MSG_MORE, false), 6);
  const CloseResult closed = writer().close();
  EXPECT_EQ(closed.unread_bytes, 7u);
  EXPECT_EQ(closed.error, 0);
  // What had gone out is read; what MSG_MORE held back goes with the reset,
  // and the end is a reset, not EOF.
  std::vector<uint8_t> buffer(100);
  ASSERT_EQ(receive_bytes(reader(), buffer), 4);
  EXPECT_EQ(as_text(buffer, 4), "sent");
  EXPECT_EQ(receive_bytes(reader(), buffer), -ECONNRESET);
  EXPECT_EQ(send_bytes(reader(), text("anyone?"), 0, false), -EPIPE);
  EXPECT_EQ(send_bytes(writer(), text("after close"), 0, false), -EPIPE);
}

TEST_F(StreamReceiveFlagsTest, OrderlyCloseIsEofThenOneWriteThenEpipe) {
  ASSERT_EQ(send_bytes(writer(), text("last words"), MSG_MORE, false), 10);
  const CloseResult closed = writer().close();
  EXPECT_EQ(closed.unread_bytes, 0u);
  EXPECT_EQ(closed.error, 0);
  std::vector<uint8_t> buffer(100);
  ASSERT_EQ(receive_bytes(reader(), buffer), 10);
  EXPECT_EQ(as_text(buffer, 10), "last words");
  EXPECT_EQ(receive_bytes(reader(), buffer), 0);
  // As after a FIN: readable (EOF) and writable, no error, no hang-up.
  const short after_close = reader().readiness();
  EXPECT_EQ(after_close & (POLLIN | POLLRDHUP | POLLOUT), POLLIN | POLLRDHUP | POLLOUT);
  EXPECT_EQ(after_close & (POLLHUP | POLLERR), 0);
  // TCP takes one write (the peer's kernel answers it with a reset), then
  // fails every write with EPIPE.
  EXPECT_EQ(send_bytes(reader(), text("anyone?"), 0, false), 7);
  EXPECT_EQ(reader().readiness() & (POLLHUP | POLLERR), POLLHUP | POLLERR);
  EXPECT_EQ(send_bytes(reader(), text("anyone?"), 0, false), -EPIPE);
  EXPECT_EQ(send_bytes(reader(), text("anyone?"), 0, false), -EPIPE);
  EXPECT_EQ(receive_bytes(reader(), buffer), 0);
}

TEST_F(StreamReceiveFlagsTest, ABlockedReceiveReturnsEintrOnASignal) {
  install_interrupting_handler();
  Watchdog watchdog(30s);
  std::atomic<ssize_t> result{1};
  std::thread receiver([&] {
    std::vector<uint8_t> buffer(10);
    result = receive_bytes(reader(), buffer);
  });
  const pthread_t handle = receiver.native_handle();
  // The signal may land while the receiver spins rather than sleeps: repeat.
  while (result == 1) {
    pthread_kill(handle, SIGUSR1);
    std::this_thread::sleep_for(2ms);
  }
  receiver.join();
  EXPECT_EQ(result, -EINTR);
}

TEST_F(StreamReceiveFlagsTest, AControlEventCanBreakTheStream) {
  int control[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, control), 0);
  std::atomic<int> events{0};
  reader().set_control_channel(keep_fd(control[0]), [&](short revents) {
    events += 1;
    return (revents & POLLIN) != 0 ? ControlVerdict::connection_lost : ControlVerdict::keep_waiting;
  });
  Watchdog watchdog(30s);
  std::thread peer_dies([&] {
    std::this_thread::sleep_for(20ms);
    ASSERT_EQ(::write(control[1], "x", 1), 1);
  });
  std::vector<uint8_t> buffer(10);
  EXPECT_EQ(receive_bytes(reader(), buffer), -ECONNRESET);
  peer_dies.join();
  EXPECT_GE(events.load(), 1);
  EXPECT_EQ(receive_bytes(reader(), buffer), 0);
  EXPECT_EQ(send_bytes(reader(), text("x")), -EPIPE);
  ::close(control[0]);
  ::close(control[1]);
}

// As TCP reads what it had queued before a reset, then the error: what the
// peer sent before its kernel said it was gone is taken in before the
// stream breaks (a broken stream ignores later arrivals).
TEST_F(StreamReceiveFlagsTest, WhatArrivedBeforeTheControlChannelsResetIsReadFirst) {
  int control[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, control), 0);
  reader().set_control_channel(keep_fd(control[0]), [](short revents) {
    return (revents & POLLERR) != 0 ? ControlVerdict::connection_lost : ControlVerdict::keep_waiting;
  });
  Watchdog watchdog(30s);
  ASSERT_EQ(send_bytes(writer(), text("last words")), 10);
  // The reader has not polled since: the bytes' notification waits in its transport.
  reader().on_control_event(POLLERR);
  std::vector<uint8_t> buffer(100);
  EXPECT_EQ(receive_bytes(reader(), buffer), 10);
  EXPECT_EQ(std::string(buffer.begin(), buffer.begin() + 10), "last words");
  EXPECT_EQ(receive_bytes(reader(), buffer), -ECONNRESET);
  ::close(control[0]);
  ::close(control[1]);
}

// A peer whose process ended: its end leaves the link (between hosts the
// rdma_cm's disconnect request) and its kernel sends the TCP connection's
// FIN, maybe a moment later. As over TCP, the reader gets the data, then
// end of file; a reset only if the TCP connection says so, or says nothing
// within the grace.
class StreamPeerLeavesTest : public StreamReceiveFlagsTest {
 protected:
  void SetUp() override {
    StreamReceiveFlagsTest::SetUp();
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, control_), 0);
    reader().set_control_channel(
        keep_fd(control_[0]), [](short) { return ControlVerdict::keep_waiting; },
        [this] { return read_control_state(keep_fd(control_[0]), DoorbellsPossible::yes); });
  }
  void TearDown() override {
    ::close(control_[0]);
    if (control_[1] >= 0) ::close(control_[1]);
  }
  // The peer's kernel closes its end of the control connection in order.
  void peer_sends_fin() {
    ::close(control_[1]);
    control_[1] = -1;
  }
  int control_[2] = {-1, -1};
};

TEST_F(StreamPeerLeavesTest, AFinAfterTheLinkWentIsAnOrderlyEnd) {
  Watchdog watchdog(30s);
  ASSERT_EQ(send_bytes(writer(), text("last words")), 10);
  pair_.second_transport->peer_leaves();
  std::thread kernel([&] {
    std::this_thread::sleep_for(50ms);
    peer_sends_fin();
  });
  std::vector<uint8_t> buffer(100);
  EXPECT_EQ(receive_bytes(reader(), buffer), 10);
  // Blocks until the FIN: then end of file, never a reset.
  EXPECT_EQ(receive_bytes(reader(), buffer), 0);
  kernel.join();
  EXPECT_EQ(receive_bytes(reader(), buffer), 0);
  EXPECT_EQ(reader().take_error(), 0);
  EXPECT_EQ(reader().readiness() & (POLLIN | POLLRDHUP), POLLIN | POLLRDHUP);
  EXPECT_EQ(reader().readiness() & POLLHUP, 0);
  // TCP takes one write after the peer's close; the next one fails.
  EXPECT_EQ(send_bytes(reader(), text("x")), 1);
  EXPECT_EQ(send_bytes(reader(), text("x")), -EPIPE);
}

// Killed in the middle of a blocking write that went by rendezvous: the
// reader gets what came before it, then end of file, as from a TCP writer
// killed while its kernel still had part of a write to accept.
TEST_F(StreamPeerLeavesTest, AWriterThatLeavesInTheMiddleOfALargeWriteEndsInOrder) {
  Watchdog watchdog(30s);
  ASSERT_EQ(send_bytes(writer(), text("before")), 6);
  std::vector<uint8_t> large(200 << 10, 7);
  std::thread dying_writer([&] {
    // It never returns with all of it: the link goes first.
    EXPECT_LT(send_bytes(writer(), large), static_cast<ssize_t>(large.size()));
  });
  while (reader().readable_bytes() < 6 + large.size()) std::this_thread::sleep_for(1ms);
  pair_.second_transport->peer_leaves();
  peer_sends_fin();
  std::vector<uint8_t> buffer(100);
  EXPECT_EQ(receive_bytes(reader(), buffer), 6);
  EXPECT_EQ(std::string(buffer.begin(), buffer.begin() + 6), "before");
  EXPECT_EQ(receive_bytes(reader(), buffer), 0);
  EXPECT_EQ(reader().take_error(), 0);
  EXPECT_EQ(reader().readable_bytes(), 0u);
  dying_writer.join();
}

// The same with the write method (as over verbs) and part of the write
// already in the reader's bounce buffer: that part is read, then EOF.
TEST(StreamPeerLeavesMidWrite, WhatLandedOfTheWriteIsReadThenEndOfFile) {
  Watchdog watchdog(30s);
  LoopbackStreamPair pair;
  const StreamSettings settings = small_settings(RendezvousMethod::write);
  ASSERT_EQ(make_loopback_stream_pair({}, settings, settings, pair), 0);
  int control[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, control), 0);
  pair.second->set_control_channel(
      keep_fd(control[0]), [](short) { return ControlVerdict::keep_waiting; },
      [&] { return read_control_state(keep_fd(control[0]), DoorbellsPossible::yes); });
  std::vector<uint8_t> large(200 << 10);
  fill_pattern(12, 0, large);
  std::thread dying_writer([&] {
    EXPECT_LT(send_bytes(*pair.first, large), static_cast<ssize_t>(large.size()));
  });
  while (pair.second->readable_bytes() < large.size()) std::this_thread::sleep_for(1ms);
  // A small read pulls one bounce buffer's worth and takes 1000 bytes of it.
  std::vector<uint8_t> in(large.size());
  ASSERT_EQ(receive_bytes(*pair.second, {in.data(), 1000}), 1000);
  pair.second_transport->peer_leaves();
  ::close(control[1]);  // the FIN
  // A peek sees what landed, as the reads below get it.
  std::vector<uint8_t> peeked(large.size());
  EXPECT_EQ(receive_bytes(*pair.second, peeked, MSG_PEEK),
            static_cast<ssize_t>(settings.bounce_size - 1000));
  EXPECT_EQ(first_mismatch(12, 1000, {peeked.data(), settings.bounce_size - 1000}), -1);
  size_t received = 1000;
  for (;;) {
    const ssize_t got = receive_bytes(*pair.second, {in.data() + received, in.size() - received});
    ASSERT_GE(got, 0);
    if (got == 0) break;
    received += static_cast<size_t>(got);
  }
  EXPECT_EQ(received, settings.bounce_size);
  EXPECT_EQ(first_mismatch(12, 0, {in.data(), received}), -1);
  EXPECT_EQ(pair.second->take_error(), 0);
  dying_writer.join();
  ::close(control[0]);
}

TEST_F(StreamPeerLeavesTest, UntilTheFinANonBlockingReadSaysEagain) {
  Watchdog watchdog(30s);
  pair_.second_transport->peer_leaves();
  std::vector<uint8_t> buffer(100);
  EXPECT_EQ(receive_bytes(reader(), buffer, MSG_DONTWAIT), -EAGAIN);
  EXPECT_EQ(reader().take_error(), 0);
  // Readable, so that a waiter looks again; nothing ended yet.
  EXPECT_EQ(reader().readiness() & (POLLIN | POLLHUP | POLLERR | POLLRDHUP), POLLIN);
  peer_sends_fin();
  EXPECT_EQ(receive_bytes(reader(), buffer, MSG_DONTWAIT), 0);
}

TEST_F(StreamPeerLeavesTest, NoFinWithinTheGraceIsAReset) {
  Watchdog watchdog(30s);
  pair_.second_transport->peer_leaves();
  std::vector<uint8_t> buffer(100);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(receive_bytes(reader(), buffer), -ECONNRESET);
  const auto waited = std::chrono::steady_clock::now() - started;
  EXPECT_GE(waited, 400ms);
  EXPECT_LT(waited, 10s);
  EXPECT_EQ(receive_bytes(reader(), buffer), 0);
}

TEST_F(StreamPeerLeavesTest, AResetOnTheControlConnectionIsAResetAtOnce) {
  Watchdog watchdog(30s);
  pair_.second_transport->peer_leaves();
  std::thread kernel([&] {
    std::this_thread::sleep_for(20ms);
    // Not a doorbell, not a FIN: the control connection is gone.
    ASSERT_EQ(::write(control_[1], "x", 1), 1);
  });
  std::vector<uint8_t> buffer(100);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(receive_bytes(reader(), buffer), -ECONNRESET);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 400ms);
  kernel.join();
}

TEST_F(StreamPeerLeavesTest, ALinkThatFailsHereIsAResetAtOnce) {
  Watchdog watchdog(30s);
  // Not the peer leaving (a failure seen here): no FIN is to be expected.
  pair_.second_transport->drop_link();
  std::vector<uint8_t> buffer(100);
  EXPECT_EQ(receive_bytes(reader(), buffer, MSG_DONTWAIT), -ECONNRESET);
}

TEST_F(StreamReceiveFlagsTest, AStopWatchingVerdictKeepsTheStreamAlive) {
  int control[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, control), 0);
  ::close(control[1]);  // readable (EOF) forever
  std::atomic<int> events{0};
  reader().set_control_channel(keep_fd(control[0]), [&](short) {
    events += 1;
    return ControlVerdict::stop_watching;
  });
  Watchdog watchdog(30s);
  std::thread sender([&] {
    std::this_thread::sleep_for(30ms);
    ASSERT_EQ(send_bytes(writer(), text("fine")), 4);
  });
  std::vector<uint8_t> buffer(10);
  EXPECT_EQ(receive_bytes(reader(), buffer), 4);
  sender.join();
  EXPECT_EQ(events.load(), 1);
  ::close(control[0]);
}

TEST_F(StreamReceiveFlagsTest, ZeroLengthCallsReturnZero) {
  EXPECT_EQ(writer().send({}, 0, true), 0);
  EXPECT_EQ(reader().receive({}, 0, true), 0);
}

// As tcp_recvmsg: a zero-length receive that may not wait says EAGAIN on an
// empty stream, and 0 once there is something to read.
TEST_F(StreamReceiveFlagsTest, ZeroLengthNonBlockingReceiveOnAnEmptyStreamIsEagain) {
  EXPECT_EQ(reader().receive({}, 0, false), -EAGAIN);
  EXPECT_EQ(reader().receive({}, MSG_DONTWAIT, true), -EAGAIN);
  ASSERT_EQ(send_bytes(writer(), text("x")), 1);
  Watchdog watchdog(30s);
  std::vector<uint8_t> buffer(1);
  EXPECT_EQ(receive_bytes(reader(), buffer, MSG_PEEK), 1);
  EXPECT_EQ(reader().receive({}, 0, false), 0);
}

TEST_F(StreamReceiveFlagsTest, AbortWakesEveryWaiter) {
  Watchdog watchdog(30s);
  std::atomic<ssize_t> received{1};
  std::thread receiver([&] {
    std::vector<uint8_t> buffer(10);
    received = receive_bytes(reader(), buffer);
  });
  std::this_thread::sleep_for(20ms);
  reader().abort();
  receiver.join();
  EXPECT_EQ(received, 0);
  EXPECT_EQ(send_bytes(reader(), text("x")), -EPIPE);
}

}  // namespace
}  // namespace qpsock::stream
