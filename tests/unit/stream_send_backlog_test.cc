// The send backlog: what the peer's ring has no room for is taken at once,
// as TCP's send buffer takes it (non-blocking writes, and blocking ones after
// room_patience), and goes to the peer as its reader frees room, though the
// writer's application never calls in again: the reader rings the writer's
// doorbell with its credit, and the writer's engine (answer_peer, as the
// doorbell watcher calls it) pushes. Every byte arrives once, in order, and
// the end of stream after the last.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "common/kept_fd.h"
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

constexpr uint64_t kSendBacklogLimit = 192 << 10;

// Drains every byte waiting on `fd` (the doorbells); never blocks.
void take_doorbell_bytes(int fd) {
  char bytes[64];
  while (recv(fd, bytes, sizeof(bytes), MSG_DONTWAIT) > 0) {
  }
}

class StreamSendBacklogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StreamSettings settings = small_settings();
    settings.send_backlog_limit = kSendBacklogLimit;
    settings.room_patience = std::chrono::microseconds{2000};
    settings.close_flush_timeout = 300ms;
    // A rendezvous nobody takes is withdrawn soon, and its bytes copied.
    settings.rendezvous_patience = 5ms;
    ASSERT_EQ(make_loopback_stream_pair({}, settings, settings, pair_), 0);
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control_), 0);
    auto take = [](int fd) {
      return [fd](short) {
        take_doorbell_bytes(fd);
        return ControlVerdict::keep_waiting;
      };
    };
    writer().set_control_channel(keep_fd(control_[0]), take(control_[0]));
    reader().set_control_channel(keep_fd(control_[1]), take(control_[1]));
    writer().allow_doorbells();
    reader().allow_doorbells();
    writer().allow_credit_doorbells();
    reader().allow_credit_doorbells();
  }
  void TearDown() override {
    stop_watcher();
    pair_ = {};
    close(control_[0]);
    close(control_[1]);
  }
  Stream& writer() { return *pair_.first; }
  Stream& reader() { return *pair_.second; }

  // The doorbell watchers of both ends, as upgrade/doorbell_watcher runs them.
  void start_watcher() {
    watcher_ = std::thread([this] {
      while (!stop_.load()) {
        pollfd rings[2] = {{control_[0], POLLIN, 0}, {control_[1], POLLIN, 0}};
        if (poll(rings, 2, 10) <= 0) continue;
        for (int end = 0; end < 2; ++end) {
          if (rings[end].revents == 0) continue;
          take_doorbell_bytes(control_[end]);
          (end == 0 ? writer() : reader()).answer_peer();
        }
      }
    });
  }
  void stop_watcher() {
    stop_.store(true);
    if (watcher_.joinable()) watcher_.join();
  }

  size_t write_until_full(std::span<const uint8_t> data, size_t offset) {
    return testing::write_until_full(writer(), data, offset);
  }

  LoopbackStreamPair pair_;
  int control_[2] = {-1, -1};
  std::thread watcher_;
  std::atomic<bool> stop_{false};
};

TEST_F(StreamSendBacklogTest, ANonBlockingWriterGetsTheRingAndTheBacklogAtOnce) {
  std::vector<uint8_t> data(1 << 20);
  fill_pattern(21, 0, data);
  // One call takes the ring's room and the backlog's, with nobody reading.
  const ssize_t first = send_bytes(writer(), data, 0, false);
  ASSERT_GT(first, static_cast<ssize_t>(kSendBacklogLimit + (32 << 10)));
  EXPECT_LE(first, static_cast<ssize_t>(kSendBacklogLimit + (64 << 10)));
  EXPECT_EQ(writer().readiness() & POLLOUT, 0);
  EXPECT_EQ(send_bytes(writer(), {data.data() + first, 10}, 0, false), -EAGAIN);
  // SIOCOUTQ counts the held bytes.
  EXPECT_GE(writer().unsent_bytes(), kSendBacklogLimit);

  // The writer's application calls nothing more: its engine pushes what it
  // holds as the reader's reads free the ring, rung by the reader's credit.
  start_watcher();
  Watchdog watchdog(60s);
  std::vector<uint8_t> in(static_cast<size_t>(first));
  ASSERT_EQ(receive_bytes(reader(), in, MSG_WAITALL), first);
  EXPECT_EQ(first_mismatch(21, 0, in), -1);
  EXPECT_NE(writer().readiness() & POLLOUT, 0);
  EXPECT_EQ(writer().unsent_bytes(), 0u);
}

TEST_F(StreamSendBacklogTest, WriteReadinessFollowsTheBacklogsRoom) {
  std::vector<uint8_t> data(1 << 20);
  fill_pattern(22, 0, data);
  size_t written = 0;
  // Small writes: writable (POLLOUT) means the next one is taken.
  while ((writer().readiness() & POLLOUT) != 0) {
    ASSERT_EQ(send_bytes(writer(), {data.data() + written, 1000}, 0, false), 1000);
    written += 1000;
    ASSERT_LT(written, data.size());
  }
  // Writable until two thirds of the backlog are used, as TCP's send buffer.
  EXPECT_GE(written, (64u << 10) + kSendBacklogLimit * 2 / 3 - 2000);
  written = write_until_full(data, written);
  start_watcher();
  Watchdog watchdog(60s);
  std::vector<uint8_t> in(written);
  ASSERT_EQ(receive_bytes(reader(), in, MSG_WAITALL), static_cast<ssize_t>(written));
  EXPECT_EQ(first_mismatch(22, 0, in), -1);
}

TEST_F(StreamSendBacklogTest, ABlockingWriteTakesTheBacklogAfterThePatience) {
  std::vector<uint8_t> data((64 << 10) + kSendBacklogLimit - (8 << 10));
  fill_pattern(23, 0, data);
  Watchdog watchdog(60s);
  // Nobody reads (the reader's engine answers the rendezvous's cancel, and
  // holds nothing for its application): TCP's send buffer would take it
  // all, and so do we.
  start_watcher();
  ASSERT_EQ(send_bytes(writer(), data), static_cast<ssize_t>(data.size()));
  std::vector<uint8_t> in(data.size());
  ASSERT_EQ(receive_bytes(reader(), in, MSG_WAITALL), static_cast<ssize_t>(data.size()));
  EXPECT_EQ(first_mismatch(23, 0, in), -1);
}

TEST_F(StreamSendBacklogTest, TheEndOfStreamComesAfterTheHeldBytes) {
  std::vector<uint8_t> data(512 << 10);
  fill_pattern(24, 0, data);
  const size_t written = write_until_full(data, 0);
  ASSERT_GT(written, 64u << 10);
  std::atomic<int> ends_sent{0};
  writer().set_end_sent_handler([&] { ++ends_sent; });
  // At once, as TCP's: the end (and the socket layer's FIN) waits.
  ASSERT_EQ(writer().shutdown_write(), 1);
  EXPECT_EQ(ends_sent.load(), 0);
  start_watcher();
  Watchdog watchdog(60s);
  std::vector<uint8_t> in(written + 1);
  ASSERT_EQ(receive_bytes(reader(), in, MSG_WAITALL), static_cast<ssize_t>(written));
  EXPECT_EQ(first_mismatch(24, 0, {in.data(), written}), -1);
  EXPECT_EQ(receive_bytes(reader(), in, 0), 0);
  EXPECT_EQ(ends_sent.load(), 1);
}

TEST_F(StreamSendBacklogTest, WithNothingHeldTheEndGoesAtOnce) {
  std::vector<uint8_t> data(1000);
  ASSERT_EQ(send_bytes(writer(), data, 0, false), 1000);
  writer().set_end_sent_handler([] { ADD_FAILURE() << "nothing waited"; });
  EXPECT_EQ(writer().shutdown_write(), 0);
}

TEST_F(StreamSendBacklogTest, CloseDeliversTheHeldBytesToAReader) {
  std::vector<uint8_t> data(512 << 10);
  fill_pattern(25, 0, data);
  const size_t written = write_until_full(data, 0);
  Watchdog watchdog(60s);
  std::vector<uint8_t> in(written + 1);
  std::thread reading([&] {
    EXPECT_EQ(receive_bytes(reader(), in, MSG_WAITALL), static_cast<ssize_t>(written));
    EXPECT_EQ(receive_bytes(reader(), in, 0), 0);
  });
  const CloseResult closed = writer().close();
  reading.join();
  EXPECT_EQ(closed.lost_bytes, 0u);
  EXPECT_EQ(closed.error, 0);
  EXPECT_EQ(first_mismatch(25, 0, {in.data(), written}), -1);
}

TEST_F(StreamSendBacklogTest, CloseWithoutRoomSaysWhatWasLost) {
  std::vector<uint8_t> data(512 << 10);
  const size_t written = write_until_full(data, 0);
  Watchdog watchdog(60s);
  // Nobody reads, and the reader's engine holds nothing for it (no receive
  // backlog): the held bytes cannot go, and close says so.
  const CloseResult closed = writer().close();
  EXPECT_GT(closed.lost_bytes, 0u);
  EXPECT_LE(closed.lost_bytes, written);
  EXPECT_NE(closed.error, 0);
}

// Which of the reader's two switches its test makes last.
enum class LastSwitch { sending, receiving };

// A writer holds bytes; the reader frees its ring, and the doorbell its
// credit owes the writer must wait until the reader's `last` switch.
void expect_credit_doorbell_waits_for(LastSwitch last, uint32_t seed) {
  StreamSettings settings = small_settings();
  settings.send_backlog_limit = kSendBacklogLimit;
  LoopbackStreamPair pair;
  ASSERT_EQ(make_loopback_stream_pair({}, settings, settings, pair), 0);
  int control[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control), 0);
  auto keep_waiting = [](short) { return ControlVerdict::keep_waiting; };
  pair.first->set_control_channel(keep_fd(control[0]), keep_waiting);
  pair.second->set_control_channel(keep_fd(control[1]), keep_waiting);
  pair.first->allow_doorbells();
  const auto switch_reader = [&](LastSwitch which) {
    if (which == LastSwitch::sending) pair.second->allow_doorbells();
    else pair.second->allow_credit_doorbells();
  };
  switch_reader(last == LastSwitch::sending ? LastSwitch::receiving : LastSwitch::sending);
  std::vector<uint8_t> data(512 << 10);
  fill_pattern(seed, 0, data);
  const ssize_t held = send_bytes(*pair.first, data, 0, false);
  ASSERT_GT(held, 64 << 10);
  // The reader frees the ring: its credit would ring the writer's doorbell.
  std::vector<uint8_t> in(static_cast<size_t>(held));
  ASSERT_GT(receive_bytes(*pair.second, in, 0, false), 0);
  char byte;
  EXPECT_EQ(recv(control[0], &byte, 1, MSG_DONTWAIT), -1);
  switch_reader(last);
  EXPECT_EQ(recv(control[0], &byte, 1, MSG_DONTWAIT), 1);
  pair = {};
  close(control[0]);
  close(control[1]);
}

// Before the reader's own sending direction switched, a byte it wrote into
// TCP would be its application's: the doorbell it owes waits until then.
TEST(StreamSendBacklogDoorbellTest, TheReaderRingsOnlyOnceItsSendingSwitched) {
  expect_credit_doorbell_waits_for(LastSwitch::sending, 26);
}

// Before the reader's receiving direction switched it has not read all the
// writer sent over TCP: a doorbell reaching the writer's socket after its
// close would reset it and throw that away, so the credit's doorbell waits.
TEST(StreamSendBacklogDoorbellTest, TheReaderRingsForCreditOnlyOnceItsReceivingSwitched) {
  expect_credit_doorbell_waits_for(LastSwitch::receiving, 27);
}

TEST_F(StreamSendBacklogTest, WithoutALimitTheWriterWaitsForTheRing) {
  StreamSettings settings = small_settings();
  LoopbackStreamPair pair;
  ASSERT_EQ(make_loopback_stream_pair({}, settings, settings, pair), 0);
  std::vector<uint8_t> data(256 << 10);
  const ssize_t first = send_bytes(*pair.first, data, 0, false);
  ASSERT_GT(first, 0);
  EXPECT_LE(first, 64 << 10);
  EXPECT_EQ(pair.first->readiness() & POLLOUT, 0);
}

}  // namespace
}  // namespace qpsock::stream
