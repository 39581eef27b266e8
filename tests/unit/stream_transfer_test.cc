// Moving bytes through a pair of streams over the loopback transport: tiny and
// huge writes, eager and rendezvous, ring wraparound, reads and writes of
// random sizes. Every byte is checked against a deterministic pattern.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "support/stream_test_support.h"

namespace qpsock::stream {
namespace {

using namespace std::chrono_literals;
using testing::first_mismatch;
using testing::fill_pattern;
using testing::receive_bytes;
using testing::send_bytes;
using testing::small_settings;
using testing::Watchdog;

class StreamTransferTest : public ::testing::Test {
 protected:
  void make(const StreamSettings& settings = small_settings(), const LoopbackOptions& options = {}) {
    ASSERT_EQ(make_loopback_stream_pair(options, settings, settings, pair_), 0);
  }
  Stream& writer() { return *pair_.first; }
  Stream& reader() { return *pair_.second; }

  // Reads `total` bytes in reads of random sizes up to `largest_read`, checking each.
  void read_and_check(uint64_t seed, uint64_t total, size_t largest_read, uint64_t random_seed) {
    std::mt19937_64 random(random_seed);
    std::vector<uint8_t> buffer(largest_read);
    uint64_t offset = 0;
    while (offset < total) {
      const size_t size = 1 + random() % largest_read;
      const ssize_t got = receive_bytes(reader(), {buffer.data(), size});
      ASSERT_GT(got, 0) << "at offset " << offset;
      ASSERT_EQ(first_mismatch(seed, offset, {buffer.data(), static_cast<size_t>(got)}), -1)
          << "at offset " << offset;
      offset += got;
    }
    EXPECT_EQ(offset, total);
  }

  LoopbackStreamPair pair_;
};

TEST_F(StreamTransferTest, OneByteArrivesAndIsCountedReadable) {
  make();
  const uint8_t byte = 0x5a;
  ASSERT_EQ(send_bytes(writer(), {&byte, 1}, 0, false), 1);
  EXPECT_EQ(reader().readable_bytes(), 1u);
  uint8_t got = 0;
  ASSERT_EQ(receive_bytes(reader(), {&got, 1}, 0, false), 1);
  EXPECT_EQ(got, 0x5a);
  EXPECT_EQ(reader().readable_bytes(), 0u);
  EXPECT_EQ(receive_bytes(reader(), {&got, 1}, 0, false), -EAGAIN);
}

TEST_F(StreamTransferTest, BothDirectionsCarryIndependentStreams) {
  make();
  const std::vector<uint8_t> there(1000, 1), back(3000, 2);
  ASSERT_EQ(send_bytes(writer(), there, 0, false), 1000);
  ASSERT_EQ(send_bytes(reader(), back, 0, false), 3000);
  std::vector<uint8_t> buffer(5000);
  EXPECT_EQ(receive_bytes(reader(), buffer, 0, false), 1000);
  EXPECT_EQ(buffer[999], 1);
  EXPECT_EQ(receive_bytes(writer(), buffer, 0, false), 3000);
  EXPECT_EQ(buffer[2999], 2);
}

TEST_F(StreamTransferTest, TheRingWrapsManyTimesWithOddSizedRecords) {
  make();
  std::mt19937_64 random(11);
  const uint64_t total = 8 << 20;  // 128 laps of a 64 KiB ring
  std::vector<uint8_t> out(5000), in(5000);
  uint64_t sent = 0, received = 0;
  while (received < total) {
    if (sent < total) {
      const size_t size = std::min<uint64_t>(1 + random() % 4999, total - sent);
      fill_pattern(1, sent, {out.data(), size});
      const ssize_t accepted = send_bytes(writer(), {out.data(), size}, 0, false);
      ASSERT_TRUE(accepted > 0 || accepted == -EAGAIN) << accepted;
      if (accepted > 0) sent += accepted;
    }
    const size_t size = 1 + random() % 4999;
    const ssize_t got = receive_bytes(reader(), {in.data(), size}, 0, false);
    ASSERT_TRUE(got > 0 || got == -EAGAIN) << got;
    if (got > 0) {
      ASSERT_EQ(first_mismatch(1, received, {in.data(), static_cast<size_t>(got)}), -1);
      received += got;
    }
  }
  EXPECT_EQ(sent, total);
}

TEST_F(StreamTransferTest, SixteenMebibytesEagerInOneBlockingWrite) {
  StreamSettings settings = small_settings();
  settings.rendezvous_threshold = uint64_t{1} << 40;  // never
  make(settings);
  Watchdog watchdog(60s);
  const uint64_t total = 16 << 20;
  std::vector<uint8_t> data(total);
  fill_pattern(2, 0, data);
  std::thread sender([&] { EXPECT_EQ(send_bytes(writer(), data), static_cast<ssize_t>(total)); });
  read_and_check(2, total, 200000, 1);
  sender.join();
  EXPECT_EQ(pair_.second_transport->statistics().reads, 0u);
  EXPECT_EQ(writer().unsent_bytes(), 0u);
}

TEST_F(StreamTransferTest, SixteenMebibytesByRendezvous) {
  make();
  Watchdog watchdog(60s);
  const uint64_t total = 16 << 20;
  std::vector<uint8_t> data(total);
  fill_pattern(3, 0, data);
  std::thread sender([&] { EXPECT_EQ(send_bytes(writer(), data), static_cast<ssize_t>(total)); });
  read_and_check(3, total, 1 << 20, 2);
  sender.join();
  const LoopbackStatistics pulled = pair_.second_transport->statistics();
  EXPECT_GT(pulled.reads, 0u);
  EXPECT_EQ(pulled.bytes_read, total);
  // The writer's ring writes carried descriptors, not the data.
  EXPECT_LT(pair_.first_transport->statistics().bytes_written, 4096u);
}

TEST_F(StreamTransferTest, InterleavedWritesAndReadsOfRandomSizes) {
  make();
  Watchdog watchdog(60s);
  const uint64_t total = 6 << 20;
  std::vector<uint8_t> data(total);
  fill_pattern(4, 0, data);
  std::thread sender([&] {
    std::mt19937_64 random(5);
    uint64_t sent = 0;
    while (sent < total) {
      const size_t size = std::min<uint64_t>(1 + random() % (100 << 10), total - sent);
      const ssize_t accepted = send_bytes(writer(), {data.data() + sent, size});
      ASSERT_EQ(accepted, static_cast<ssize_t>(size));
      sent += accepted;
    }
  });
  read_and_check(4, total, 70 << 10, 6);
  sender.join();
}

TEST_F(StreamTransferTest, GathersAndScattersIovecs) {
  make();
  std::vector<uint8_t> data(20000);
  fill_pattern(5, 0, data);
  const iovec pieces[] = {{data.data(), 3},         {data.data() + 3, 0},
                          {data.data() + 3, 9000},  {data.data() + 9003, 1},
                          {data.data() + 9004, 10996}};
  ASSERT_EQ(writer().send(pieces, 0, false), 20000);
  std::vector<uint8_t> in(20000);
  const iovec into[] = {{in.data(), 1}, {in.data() + 1, 12345}, {in.data() + 12346, 7654}};
  ASSERT_EQ(reader().receive(into, MSG_WAITALL, true), 20000);
  EXPECT_EQ(in, data);
}

TEST_F(StreamTransferTest, InlineWritesGoStraightFromTheCallersBuffer) {
  LoopbackOptions options;
  options.max_inline = 512;
  make(small_settings(), options);
  std::vector<uint8_t> small(200, 9);
  ASSERT_EQ(send_bytes(writer(), small, 0, false), 200);
  EXPECT_EQ(pair_.first_transport->statistics().inline_writes, 1u);
  std::vector<uint8_t> large(3000, 8);
  ASSERT_EQ(send_bytes(writer(), large, 0, false), 3000);
  EXPECT_EQ(pair_.first_transport->statistics().inline_writes, 1u);  // staged instead
  std::vector<uint8_t> in(3200);
  ASSERT_EQ(receive_bytes(reader(), in, MSG_WAITALL), 3200);
  EXPECT_EQ(in[199], 9);
  EXPECT_EQ(in[3199], 8);
}

TEST_F(StreamTransferTest, NonBlockingSendsCopyEvenLargePieces) {
  make();
  std::vector<uint8_t> data(1 << 20);
  fill_pattern(6, 0, data);
  const ssize_t accepted = send_bytes(writer(), data, 0, false);
  ASSERT_GT(accepted, 0);
  EXPECT_LE(accepted, 64 << 10);
  EXPECT_EQ(pair_.second_transport->statistics().reads, 0u);
  std::vector<uint8_t> in(accepted);
  ASSERT_EQ(receive_bytes(reader(), in, 0, false), accepted);
  EXPECT_EQ(first_mismatch(6, 0, in), -1);
}

TEST_F(StreamTransferTest, StreamsOfDifferentRingSizesTalk) {
  StreamSettings big = small_settings();
  big.ring_size = 1 << 20;
  big.eager_chunk = 64 << 10;
  ASSERT_EQ(make_loopback_stream_pair({}, small_settings(), big, pair_), 0);
  Watchdog watchdog(60s);
  const uint64_t total = 3 << 20;
  std::vector<uint8_t> data(total);
  fill_pattern(7, 0, data);
  std::thread sender([&] { EXPECT_EQ(send_bytes(reader(), data, 0), static_cast<ssize_t>(total)); });
  std::vector<uint8_t> in(total);
  ASSERT_EQ(receive_bytes(writer(), in, MSG_WAITALL), static_cast<ssize_t>(total));
  sender.join();
  EXPECT_EQ(first_mismatch(7, 0, in), -1);
}

}  // namespace
}  // namespace qpsock::stream
