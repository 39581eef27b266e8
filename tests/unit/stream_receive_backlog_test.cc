// The receive backlog: a writer whose reader does not read gets room beyond
// the reader's ring, as TCP's buffers give it. The writer says when it has
// waited for room (the room-wanted handler, then ask_peer_for_room once the
// patience passed); the reader's engine, rung (answer_peer), moves the
// ring's data into its backlog and returns the credit; every byte is then
// read, peeked and counted in order, and the end of stream comes after it.
#include <gtest/gtest.h>
#include <poll.h>

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

constexpr uint64_t kBacklogLimit = 200 << 10;

class StreamReceiveBacklogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StreamSettings settings = small_settings();
    settings.receive_backlog_limit = kBacklogLimit;
    // Long enough that the look right after the stall always comes before
    // it, under ASan on a loaded machine too (1 ms did not, in CI).
    settings.room_patience = std::chrono::microseconds{50000};
    ASSERT_EQ(make_loopback_stream_pair({}, settings, settings, pair_), 0);
    writer().set_room_wanted_handler([this] { ++stalls_; });
  }
  Stream& writer() { return *pair_.first; }
  Stream& reader() { return *pair_.second; }

  size_t write_until_full(std::span<const uint8_t> data, size_t offset) {
    return testing::write_until_full(writer(), data, offset);
  }

  LoopbackStreamPair pair_;
  int stalls_ = 0;
};

TEST_F(StreamReceiveBacklogTest, AnIdleReadersEngineGivesTheWriterRoomUpToTheLimit) {
  std::vector<uint8_t> data(2 << 20);
  fill_pattern(7, 0, data);
  size_t written = write_until_full(data, 0);
  ASSERT_GT(written, 32u << 10);
  EXPECT_EQ(stalls_, 1);
  EXPECT_EQ(writer().readiness() & POLLOUT, 0);
  EXPECT_EQ(stalls_, 1);  // one stall, told once
  // Not before the patience: the reader may just be slow.
  EXPECT_TRUE(writer().ask_peer_for_room());
  std::this_thread::sleep_for(60ms);
  EXPECT_FALSE(writer().ask_peer_for_room());
  EXPECT_FALSE(writer().ask_peer_for_room());  // asked once per stall

  // The reader's engine, rung, takes the ring's bytes for its application.
  int rounds = 0;
  for (;; ++rounds) {
    ASSERT_LT(rounds, 100);
    reader().answer_peer();
    if ((writer().readiness() & POLLOUT) == 0) break;
    written = write_until_full(data, written);
  }
  EXPECT_GT(rounds, 1);
  EXPECT_GE(stalls_, 2);
  // The limit beyond the ring, and at most the ring beyond that.
  EXPECT_GE(written, kBacklogLimit);
  EXPECT_LE(written, kBacklogLimit + (64u << 10));
  EXPECT_EQ(reader().readable_bytes(), written);

  // Peeking sees the backlog's bytes, then the ring's.
  std::vector<uint8_t> in(written);
  ASSERT_EQ(receive_bytes(reader(), in, MSG_PEEK, false), static_cast<ssize_t>(written));
  EXPECT_EQ(first_mismatch(7, 0, in), -1);
  // Reading them in odd pieces gives every byte once, in order.
  size_t read = 0;
  while (read < written) {
    const size_t piece = std::min<size_t>(written - read, 777 + read % 5000);
    ASSERT_EQ(receive_bytes(reader(), {in.data() + read, piece}, 0, false),
              static_cast<ssize_t>(piece));
    read += piece;
  }
  EXPECT_EQ(first_mismatch(7, 0, in), -1);
  EXPECT_EQ(reader().readable_bytes(), 0u);
  EXPECT_EQ(receive_bytes(reader(), in, 0, false), -EAGAIN);

  // The writer goes on, and the end of stream comes after everything.
  const ssize_t more = send_bytes(writer(), {data.data() + written, 1000}, 0, false);
  ASSERT_EQ(more, 1000);
  ASSERT_EQ(writer().shutdown_write(), 0);
  std::vector<uint8_t> tail(1000);
  ASSERT_EQ(receive_bytes(reader(), tail, MSG_WAITALL), 1000);
  EXPECT_EQ(first_mismatch(7, written, tail), -1);
  EXPECT_EQ(receive_bytes(reader(), tail, 0), 0);
}

TEST_F(StreamReceiveBacklogTest, AReadStartedInARecordGoesOnInTheBacklog) {
  std::vector<uint8_t> data(1 << 20);
  fill_pattern(8, 0, data);
  size_t written = write_until_full(data, 0);
  std::vector<uint8_t> in(written + (64 << 10));
  ASSERT_EQ(receive_bytes(reader(), {in.data(), 100}, 0, false), 100);
  reader().answer_peer();
  written = write_until_full(data, written);
  ASSERT_EQ(receive_bytes(reader(), {in.data() + 100, written - 100}, MSG_WAITALL),
            static_cast<ssize_t>(written - 100));
  EXPECT_EQ(first_mismatch(8, 0, {in.data(), written}), -1);
}

TEST_F(StreamReceiveBacklogTest, BytesInTheBacklogAreNoEndOfStreamAndCountAsUnreadAtClose) {
  std::vector<uint8_t> data(256 << 10);
  fill_pattern(9, 0, data);
  const size_t written = write_until_full(data, 0);
  ASSERT_EQ(writer().shutdown_write(), 0);
  reader().answer_peer();
  // Everything moved: the ring is empty up to the end of stream, the
  // backlog is not, and nobody reads an early EOF.
  EXPECT_EQ(reader().readable_bytes(), written);
  std::vector<uint8_t> in(10);
  ASSERT_EQ(receive_bytes(reader(), in, 0, false), 10);
  EXPECT_EQ(first_mismatch(9, 0, in), -1);
  const CloseResult closed = reader().close();
  EXPECT_EQ(closed.unread_bytes, written - 10);
}

// All of a process's backlogs together stay under the process's limit, as
// TCP's buffers stay under tcp_mem; what one gives up another may take.
TEST_F(StreamReceiveBacklogTest, TheProcessLimitBoundsEveryBacklogTogether) {
  StreamSettings settings = small_settings();
  settings.receive_backlog_limit = kBacklogLimit;
  settings.backlog_process_limit = 100 << 10;
  LoopbackStreamPair one, two;
  ASSERT_EQ(make_loopback_stream_pair({}, settings, settings, one), 0);
  ASSERT_EQ(make_loopback_stream_pair({}, settings, settings, two), 0);
  std::vector<uint8_t> data(1 << 20);
  fill_pattern(10, 0, data);
  auto fill = [&](LoopbackStreamPair& pair, size_t written) {
    for (int round = 0; round < 20; ++round) {
      const iovec rest{data.data() + written, data.size() - written};
      const ssize_t sent = pair.first->send({&rest, 1}, 0, false);
      if (sent > 0) written += static_cast<size_t>(sent);
      pair.second->answer_peer();
    }
    return written;
  };
  const size_t first = fill(one, 0);
  // The ring (64 KiB) and 100 KiB of backlog, at most.
  EXPECT_GE(first, 100u << 10);
  EXPECT_LE(first, (164u << 10) + 1);
  const size_t second_before = fill(two, 0);
  EXPECT_LE(second_before, 64u << 10);  // nothing left for the second
  std::vector<uint8_t> in(first);
  ASSERT_EQ(receive_bytes(*one.second, in, MSG_WAITALL), static_cast<ssize_t>(first));
  EXPECT_EQ(first_mismatch(10, 0, in), -1);
  // The freed budget goes to the second.
  const size_t second = fill(two, second_before);
  EXPECT_GE(second, 100u << 10);
  std::vector<uint8_t> in_two(second);
  ASSERT_EQ(receive_bytes(*two.second, in_two, MSG_WAITALL), static_cast<ssize_t>(second));
  EXPECT_EQ(first_mismatch(10, 0, in_two), -1);
}

TEST_F(StreamReceiveBacklogTest, WithoutALimitTheRingIsAllTheRoom) {
  StreamSettings settings = small_settings();
  LoopbackStreamPair pair;
  ASSERT_EQ(make_loopback_stream_pair({}, settings, settings, pair), 0);
  std::vector<uint8_t> data(256 << 10);
  const iovec all{data.data(), data.size()};
  const ssize_t first = pair.first->send({&all, 1}, 0, false);
  ASSERT_GT(first, 0);
  pair.second->answer_peer();
  EXPECT_EQ(pair.first->readiness() & POLLOUT, 0);
  EXPECT_EQ(pair.second->readable_bytes(), static_cast<size_t>(first));
}

}  // namespace
}  // namespace qpsock::stream
