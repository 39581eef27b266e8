// Credit and notification flow control: a writer runs out of ring credit and
// waits (or gets EAGAIN / a partial count) until the reader consumes; the
// engine never sends more immediates than the peer has slots for; the byte
// counts the socket layer reports (FIONREAD, SIOCOUTQ) are right.
#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <random>
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

class StreamFlowControlTest : public ::testing::Test {
 protected:
  void make(const StreamSettings& settings = small_settings(), const LoopbackOptions& options = {}) {
    ASSERT_EQ(make_loopback_stream_pair(options, settings, settings, pair_), 0);
  }
  Stream& writer() { return *pair_.first; }
  Stream& reader() { return *pair_.second; }

  LoopbackStreamPair pair_;
};

TEST_F(StreamFlowControlTest, ANonBlockingWriterGetsAPartialCountThenEagain) {
  make();
  std::vector<uint8_t> data(256 << 10);
  fill_pattern(1, 0, data);
  const ssize_t first = send_bytes(writer(), data, 0, false);
  ASSERT_GT(first, 32 << 10);
  ASSERT_LT(first, 64 << 10);
  EXPECT_EQ(send_bytes(writer(), {data.data() + first, 100}, 0, false), -EAGAIN);
  EXPECT_EQ(writer().readiness() & POLLOUT, 0);
  EXPECT_EQ(reader().readable_bytes(), static_cast<size_t>(first));

  std::vector<uint8_t> in(first);
  ASSERT_EQ(receive_bytes(reader(), in, 0, false), first);
  EXPECT_EQ(first_mismatch(1, 0, in), -1);
  // The receiver returned its credit at once (the writer said it ran out).
  EXPECT_NE(writer().readiness() & POLLOUT, 0);
  const ssize_t second = send_bytes(writer(), {data.data() + first, data.size() - first}, 0, false);
  EXPECT_GT(second, 32 << 10);
}

// SO_SNDBUF: a send window smaller than the peer's ring bounds what may be
// written and not yet read, as the kernel's send buffer does.
TEST_F(StreamFlowControlTest, TheSendWindowBoundsUnreadBytes) {
  StreamSettings settings = small_settings();
  settings.send_window = 20 << 10;
  make(settings);
  std::vector<uint8_t> data(256 << 10);
  fill_pattern(3, 0, data);
  const ssize_t first = send_bytes(writer(), data, 0, false);
  ASSERT_GT(first, 0);
  EXPECT_LE(first, 20 << 10);
  EXPECT_EQ(send_bytes(writer(), {data.data() + first, 100}, 0, false), -EAGAIN);

  std::vector<uint8_t> in(first);
  ASSERT_EQ(receive_bytes(reader(), in, 0, false), first);
  EXPECT_EQ(first_mismatch(3, 0, in), -1);
  const ssize_t second = send_bytes(writer(), {data.data() + first, data.size() - first}, 0, false);
  EXPECT_GT(second, 0);
  EXPECT_LE(second, 20 << 10);
}

TEST_F(StreamFlowControlTest, ABlockedWriterProceedsWhenTheReaderConsumes) {
  StreamSettings settings = small_settings();
  settings.rendezvous_threshold = uint64_t{1} << 40;
  make(settings);
  Watchdog watchdog(60s);
  const size_t total = 1 << 20;
  std::vector<uint8_t> data(total);
  fill_pattern(2, 0, data);
  std::atomic<bool> finished{false};
  std::thread sender([&] {
    EXPECT_EQ(send_bytes(writer(), data), static_cast<ssize_t>(total));
    finished = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(finished);
  EXPECT_LE(reader().readable_bytes(), 64u << 10);
  std::vector<uint8_t> in(total);
  ASSERT_EQ(receive_bytes(reader(), in, MSG_WAITALL), static_cast<ssize_t>(total));
  sender.join();
  EXPECT_TRUE(finished);
  EXPECT_EQ(first_mismatch(2, 0, in), -1);
}

TEST_F(StreamFlowControlTest, ReadableAndUnsentBytesFollowTheData) {
  make();
  std::vector<uint8_t> data(1000, 3);
  EXPECT_EQ(writer().unsent_bytes(), 0u);
  ASSERT_EQ(send_bytes(writer(), data, 0, false), 1000);
  EXPECT_EQ(writer().unsent_bytes(), 0u);  // in the peer's ring: delivered, as TCP would say
  EXPECT_EQ(reader().readable_bytes(), 1000u);
  std::vector<uint8_t> in(300);
  ASSERT_EQ(receive_bytes(reader(), in, 0, false), 300);
  EXPECT_EQ(reader().readable_bytes(), 700u);

  // MSG_MORE holds the announcement: the peer cannot see those bytes yet.
  ASSERT_EQ(send_bytes(writer(), {data.data(), 500}, MSG_MORE, false), 500);
  EXPECT_EQ(writer().unsent_bytes(), 500u);
  EXPECT_EQ(reader().readable_bytes(), 700u);
  ASSERT_EQ(send_bytes(writer(), {data.data(), 10}, 0, false), 10);
  EXPECT_EQ(writer().unsent_bytes(), 0u);
  EXPECT_EQ(reader().readable_bytes(), 1210u);
}

TEST_F(StreamFlowControlTest, MsgMoreIsFlushedByTheWritersNextCall) {
  make();
  std::vector<uint8_t> data(100, 4);
  ASSERT_EQ(send_bytes(writer(), data, MSG_MORE, false), 100);
  EXPECT_EQ(reader().readable_bytes(), 0u);
  writer().readiness();  // any call on the writer's stream announces them
  EXPECT_EQ(reader().readable_bytes(), 100u);
}

// A process that exits (or _exits) right after a MSG_MORE write: the kernel
// would still send the bytes, so the stream announces them before the
// transport goes with the process.
TEST_F(StreamFlowControlTest, CorkedBytesAreAnnouncedBeforeTheProcessEnds) {
  for (const auto call : {Stream::ExitCall::exit, Stream::ExitCall::underscore_exit}) {
    make();
    std::vector<uint8_t> data(700);
    fill_pattern(5, 0, data);
    ASSERT_EQ(send_bytes(writer(), data, MSG_MORE, false), 700);
    EXPECT_EQ(reader().readable_bytes(), 0u);
    const auto started = std::chrono::steady_clock::now();
    writer().deliver_before_exit(started + 10s, call);
    EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
    EXPECT_EQ(writer().unsent_bytes(), 0u);
    ASSERT_EQ(reader().readable_bytes(), 700u);
    std::vector<uint8_t> in(700);
    ASSERT_EQ(receive_bytes(reader(), in, 0, false), 700);
    EXPECT_EQ(first_mismatch(5, 0, in), -1);
    // The stream stays open: the process's end closes it.
    EXPECT_EQ(send_bytes(writer(), {data.data(), 10}, 0, false), 10);
  }
}

TEST_F(StreamFlowControlTest, UnsentBytesCountARendezvousUntilItIsPulled) {
  make();
  Watchdog watchdog(60s);
  std::vector<uint8_t> data(100 << 10);
  fill_pattern(3, 0, data);
  std::thread sender([&] { EXPECT_EQ(send_bytes(writer(), data), static_cast<ssize_t>(data.size())); });
  while (reader().readable_bytes() < data.size()) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(writer().unsent_bytes(), data.size());
  std::vector<uint8_t> in(data.size());
  ASSERT_EQ(receive_bytes(reader(), in, MSG_WAITALL), static_cast<ssize_t>(data.size()));
  sender.join();
  EXPECT_EQ(writer().unsent_bytes(), 0u);
  EXPECT_EQ(first_mismatch(3, 0, in), -1);
}

// With the smallest notification capacity (one counted slot) and small
// messages both ways, an engine that overran a peer's receive slots would
// break the loopback link (an RNR error).
TEST_F(StreamFlowControlTest, TinyNotificationCapacitiesAreNeverOverrun) {
  for (uint32_t capacity : {4u, 5u, 6u, 9u}) {
    LoopbackOptions options;
    options.notification_capacity = capacity;
    make(small_settings(), options);
    std::mt19937_64 random(capacity);
    std::vector<uint8_t> out(300), in(300);
    uint64_t sent[2] = {0, 0}, received[2] = {0, 0};
    Stream* ends[2] = {&writer(), &reader()};
    for (int round = 0; round < 3000; ++round) {
      const int from = random() % 2;
      if (random() % 3 != 0) {
        const size_t size = 1 + random() % 300;
        fill_pattern(10 + from, sent[from], {out.data(), size});
        const ssize_t accepted = send_bytes(*ends[from], {out.data(), size}, 0, false);
        ASSERT_TRUE(accepted > 0 || accepted == -EAGAIN) << accepted;
        if (accepted > 0) sent[from] += accepted;
      } else {
        const size_t size = 1 + random() % 300;
        const ssize_t got = receive_bytes(*ends[1 - from], {in.data(), size}, 0, false);
        ASSERT_TRUE(got > 0 || got == -EAGAIN) << got;
        if (got > 0) {
          ASSERT_EQ(first_mismatch(10 + from, received[from], {in.data(), static_cast<size_t>(got)}), -1);
          received[from] += got;
        }
      }
      ASSERT_FALSE(pair_.first_transport->link_broken()) << "capacity " << capacity;
      EXPECT_LE(ends[from]->notifications_in_flight(), capacity - 3);
    }
    EXPECT_GT(sent[0] + sent[1], 10000u);
  }
}

TEST_F(StreamFlowControlTest, ABlockingWriterWithOneSlotKeepsGoing) {
  LoopbackOptions options;
  options.notification_capacity = 4;
  StreamSettings settings = small_settings();
  settings.rendezvous_threshold = uint64_t{1} << 40;
  make(settings, options);
  Watchdog watchdog(60s);
  const size_t total = 2 << 20;
  std::vector<uint8_t> data(total);
  fill_pattern(4, 0, data);
  std::thread sender([&] {
    // Many small writes: each needs a notification slot.
    for (size_t sent = 0; sent < total; sent += 1000)
      ASSERT_EQ(send_bytes(writer(), {data.data() + sent, std::min<size_t>(1000, total - sent)}),
                static_cast<ssize_t>(std::min<size_t>(1000, total - sent)));
  });
  std::vector<uint8_t> in(total);
  ASSERT_EQ(receive_bytes(reader(), in, MSG_WAITALL), static_cast<ssize_t>(total));
  sender.join();
  EXPECT_EQ(first_mismatch(4, 0, in), -1);
  EXPECT_FALSE(pair_.first_transport->link_broken());
}

TEST_F(StreamFlowControlTest, ASmallSendQueueOnlySlowsThingsDown) {
  LoopbackOptions options;
  options.send_queue_depth = 4;
  options.max_outstanding_reads = 1;
  make(small_settings(), options);
  Watchdog watchdog(60s);
  const size_t total = 3 << 20;
  std::vector<uint8_t> data(total);
  fill_pattern(5, 0, data);
  std::thread sender([&] { EXPECT_EQ(send_bytes(writer(), data), static_cast<ssize_t>(total)); });
  std::vector<uint8_t> in(total);
  ASSERT_EQ(receive_bytes(reader(), in, MSG_WAITALL), static_cast<ssize_t>(total));
  sender.join();
  EXPECT_EQ(first_mismatch(5, 0, in), -1);
}

void ignore_signal(int) {}

TEST_F(StreamFlowControlTest, ASignalEndsABlockedWriteWithAPartialCount) {
  struct sigaction action {};
  action.sa_handler = ignore_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR1, &action, nullptr);
  StreamSettings settings = small_settings();
  settings.rendezvous_threshold = uint64_t{1} << 40;
  make(settings);
  Watchdog watchdog(30s);
  std::vector<uint8_t> data(1 << 20);
  fill_pattern(6, 0, data);
  std::atomic<ssize_t> sent{-1};
  std::thread sender([&] { sent = send_bytes(writer(), data); });
  while (sent == -1) {
    pthread_kill(sender.native_handle(), SIGUSR1);
    std::this_thread::sleep_for(2ms);
  }
  sender.join();
  EXPECT_GT(sent, 0);
  EXPECT_LT(sent, 64 << 10);
  std::vector<uint8_t> in(sent);
  ASSERT_EQ(receive_bytes(reader(), in, MSG_WAITALL), sent.load());
  EXPECT_EQ(first_mismatch(6, 0, in), -1);
}

}  // namespace
}  // namespace qpsock::stream
