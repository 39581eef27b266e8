// The stream engine under real concurrency (these run under ThreadSanitizer):
// a writer and a reader thread moving hundreds of MiB, both directions at
// once, one stream read and written by two threads while a third polls it.
// Sizes are random from 1 B to 4 MiB (log-uniform, so small ones are common);
// every byte is checked against a deterministic pattern.
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <cmath>
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
using testing::Watchdog;

constexpr size_t kLargestPiece = 4 << 20;

// 1 B .. 4 MiB, log-uniform.
size_t random_size(std::mt19937_64& random) {
  std::uniform_real_distribution<double> exponent(0.0, std::log2(static_cast<double>(kLargestPiece)));
  return std::max<size_t>(1, static_cast<size_t>(std::exp2(exponent(random))));
}

// The defaults (1 MiB ring, 64 KiB chunks and threshold), with a patience
// long enough that a slow reader (sanitizers) still pulls: the withdrawal
// has a test of its own.
StreamSettings threaded_settings(std::chrono::microseconds patience = std::chrono::seconds{1},
                                 RendezvousMethod method = RendezvousMethod::read) {
  StreamSettings settings;
  settings.rendezvous_method = method;
  settings.spin_time = std::chrono::microseconds{20};
  settings.rendezvous_patience = patience;
  return settings;
}

struct Tally {
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // sum of bytes, each weighted by its offset's parity: order-sensitive
  bool wrong = false;
};

void add_to_checksum(Tally& tally, std::span<const uint8_t> bytes) {
  for (size_t index = 0; index < bytes.size(); ++index)
    tally.checksum += bytes[index] * (((tally.bytes + index) & 1) + 1);
  tally.bytes += bytes.size();
}

void write_stream(Stream& stream, uint64_t seed, uint64_t total, uint64_t random_seed, Tally& tally) {
  std::mt19937_64 random(random_seed);
  std::vector<uint8_t> buffer(kLargestPiece);
  while (tally.bytes < total) {
    const size_t size = std::min<uint64_t>(random_size(random), total - tally.bytes);
    fill_pattern(seed, tally.bytes, {buffer.data(), size});
    // MSG_MORE now and then: the next call must announce them.
    const int flags = random() % 16 == 0 ? MSG_MORE : 0;
    const ssize_t sent = send_bytes(stream, {buffer.data(), size}, flags);
    if (sent != static_cast<ssize_t>(size)) {
      ADD_FAILURE() << "send returned " << sent << " for " << size;
      tally.wrong = true;
      return;
    }
    add_to_checksum(tally, {buffer.data(), size});
  }
}

void read_stream(Stream& stream, uint64_t seed, uint64_t total, uint64_t random_seed, Tally& tally) {
  std::mt19937_64 random(random_seed);
  std::vector<uint8_t> buffer(kLargestPiece);
  while (tally.bytes < total) {
    const size_t size = random_size(random);
    const int flags = random() % 8 == 0 ? MSG_WAITALL : 0;
    const size_t asked = flags == MSG_WAITALL ? std::min<uint64_t>(size, total - tally.bytes) : size;
    const ssize_t got = receive_bytes(stream, {buffer.data(), asked}, flags);
    if (got <= 0 || (flags == MSG_WAITALL && got != static_cast<ssize_t>(asked))) {
      ADD_FAILURE() << "receive returned " << got << " for " << asked;
      tally.wrong = true;
      return;
    }
    if (first_mismatch(seed, tally.bytes, {buffer.data(), static_cast<size_t>(got)}) != -1) {
      ADD_FAILURE() << "wrong bytes at " << tally.bytes;
      tally.wrong = true;
      return;
    }
    add_to_checksum(tally, {buffer.data(), static_cast<size_t>(got)});
  }
}

TEST(StreamThreaded, AWriterAndAReaderMove256MiB) {
  Watchdog watchdog(120s, "256 MiB transfer");
  LoopbackStreamPair pair;
  ASSERT_EQ(make_loopback_stream_pair({}, threaded_settings(), threaded_settings(), pair), 0);
  const uint64_t total = testing::volume(uint64_t{256} << 20);
  Tally sent, received;
  std::thread writer([&] { write_stream(*pair.first, 1, total, 2, sent); });
  std::thread reader([&] { read_stream(*pair.second, 1, total, 3, received); });
  writer.join();
  reader.join();
  EXPECT_FALSE(sent.wrong || received.wrong);
  EXPECT_EQ(received.bytes, total);
  EXPECT_EQ(received.checksum, sent.checksum);
  EXPECT_GT(pair.second_transport->statistics().reads, 0u);  // rendezvous was exercised
}

void move_both_directions_with_four_threads(const StreamSettings& settings) {
  LoopbackStreamPair pair;
  ASSERT_EQ(make_loopback_stream_pair({}, settings, settings, pair), 0);
  const uint64_t total = testing::volume(uint64_t{96} << 20);
  Tally sent_forward, received_forward, sent_back, received_back;
  std::thread forward_writer([&] { write_stream(*pair.first, 4, total, 5, sent_forward); });
  std::thread forward_reader([&] { read_stream(*pair.second, 4, total, 6, received_forward); });
  std::thread back_writer([&] { write_stream(*pair.second, 7, total, 8, sent_back); });
  std::thread back_reader([&] { read_stream(*pair.first, 7, total, 9, received_back); });
  forward_writer.join();
  forward_reader.join();
  back_writer.join();
  back_reader.join();
  EXPECT_EQ(received_forward.checksum, sent_forward.checksum);
  EXPECT_EQ(received_back.checksum, sent_back.checksum);
  EXPECT_EQ(received_forward.bytes, total);
  EXPECT_EQ(received_back.bytes, total);
  // Rendezvous was exercised (unless every one is withdrawn at once).
  if (settings.rendezvous_patience > std::chrono::microseconds{0}) {
    EXPECT_GT(pair.second->rendezvous_counts().bytes_received, 0u);
  }
}

TEST(StreamThreaded, BothDirectionsAtOnceWithFourThreads) {
  Watchdog watchdog(120s, "bidirectional transfer");
  move_both_directions_with_four_threads(threaded_settings());
}

// No patience: every rendezvous is withdrawn at once, while the other side's
// threads are pulling it, registering for it or about to: a withdrawal the
// reader has begun must complete, one it has not must leave the stream, and
// never both (a byte twice or none).
TEST(StreamThreaded, BothDirectionsAtOnceWithEveryRendezvousWithdrawnAtOnce) {
  Watchdog watchdog(120s, "bidirectional transfer, no patience");
  move_both_directions_with_four_threads(threaded_settings(std::chrono::microseconds{0}));
}

// The same with the sender writing each rendezvous as the receiver asks
// (RendezvousMethod::write, as over verbs), withdrawn or not.
TEST(StreamThreaded, BothDirectionsAtOnceWritingEveryRendezvous) {
  Watchdog watchdog(120s, "bidirectional transfer by write");
  move_both_directions_with_four_threads(
      threaded_settings(std::chrono::seconds{1}, RendezvousMethod::write));
}

TEST(StreamThreaded, BothDirectionsAtOnceWritingEveryRendezvousWithdrawnAtOnce) {
  Watchdog watchdog(120s, "bidirectional transfer by write, no patience");
  move_both_directions_with_four_threads(
      threaded_settings(std::chrono::microseconds{0}, RendezvousMethod::write));
}

TEST(StreamThreaded, OneThreadReadsWhileAnotherWritesTheSameStream) {
  Watchdog watchdog(120s, "echo through one stream");
  LoopbackStreamPair pair;
  ASSERT_EQ(make_loopback_stream_pair({}, threaded_settings(), threaded_settings(), pair), 0);
  const uint64_t total = testing::volume(uint64_t{64} << 20);
  Tally sent, echoed;
  std::atomic<bool> done{false};
  // The peer echoes whatever arrives.
  std::thread echo([&] {
    std::vector<uint8_t> buffer(1 << 20);
    uint64_t moved = 0;
    while (moved < total) {
      const ssize_t got = receive_bytes(*pair.second, buffer);
      if (got <= 0) return;
      if (send_bytes(*pair.second, {buffer.data(), static_cast<size_t>(got)}) != got) return;
      moved += got;
    }
  });
  std::thread writer([&] { write_stream(*pair.first, 10, total, 11, sent); });
  std::thread reader([&] { read_stream(*pair.first, 10, total, 12, echoed); });
  // A fourth thread polls the stream the others are using, as epoll would.
  std::thread poller([&] {
    while (!done) {
      pair.first->readiness();
      pair.first->readable_bytes();
      pair.first->unsent_bytes();
      std::this_thread::sleep_for(100us);
    }
  });
  writer.join();
  reader.join();
  done = true;
  poller.join();
  echo.join();
  EXPECT_EQ(echoed.bytes, total);
  EXPECT_EQ(echoed.checksum, sent.checksum);
}

void move_both_ways_with_tiny_resources(RendezvousMethod method) {
  LoopbackOptions options;
  options.notification_capacity = 4;
  options.send_queue_depth = 6;
  options.max_outstanding_reads = 1;
  options.max_inline = 0;
  StreamSettings settings = testing::small_settings(method);
  settings.spin_time = std::chrono::microseconds{0};
  LoopbackStreamPair pair;
  ASSERT_EQ(make_loopback_stream_pair(options, settings, settings, pair), 0);
  const uint64_t total = testing::volume(uint64_t{24} << 20);
  Tally sent_forward, received_forward, sent_back, received_back;
  std::thread forward_writer([&] { write_stream(*pair.first, 13, total, 14, sent_forward); });
  std::thread forward_reader([&] { read_stream(*pair.second, 13, total, 15, received_forward); });
  std::thread back_writer([&] { write_stream(*pair.second, 16, total, 17, sent_back); });
  std::thread back_reader([&] { read_stream(*pair.first, 16, total, 18, received_back); });
  forward_writer.join();
  forward_reader.join();
  back_writer.join();
  back_reader.join();
  EXPECT_EQ(received_forward.checksum, sent_forward.checksum);
  EXPECT_EQ(received_back.checksum, sent_back.checksum);
  EXPECT_FALSE(pair.first_transport->link_broken());
  // Rendezvous went both ways, each asking and answering through the one
  // counted notification slot.
  EXPECT_GT(pair.first->rendezvous_counts().received, 0u);
  EXPECT_GT(pair.second->rendezvous_counts().received, 0u);
}

TEST(StreamThreaded, TinyRingAndOneNotificationSlotUnderLoad) {
  Watchdog watchdog(120s, "tiny resources");
  move_both_ways_with_tiny_resources(RendezvousMethod::read);
}

TEST(StreamThreaded, TinyRingAndOneNotificationSlotUnderLoadWritingEveryRendezvous) {
  Watchdog watchdog(120s, "tiny resources, rendezvous by write");
  move_both_ways_with_tiny_resources(RendezvousMethod::write);
}

// The reader takes the last byte of a rendezvous while its one counted slot
// is in flight (the credit for the data before it), and then never calls in
// again: the writer's send still returns, as a TCP send into a buffer would.
// (TinyRingAndOneNotificationSlotUnderLoad hung here about once in 80 runs.)
TEST(StreamThreaded, RendezvousAnswerWhenTheReaderStopsCallingIn) {
  Watchdog watchdog(120s, "rendezvous answer");
  LoopbackOptions options;
  options.notification_capacity = 4;
  options.send_queue_depth = 6;
  options.max_outstanding_reads = 1;
  options.max_inline = 0;
  StreamSettings settings = testing::small_settings(RendezvousMethod::read);
  settings.spin_time = std::chrono::microseconds{0};
  LoopbackStreamPair pair;
  ASSERT_EQ(make_loopback_stream_pair(options, settings, settings, pair), 0);
  constexpr size_t kEager = 20 << 10;
  constexpr size_t kRendezvous = 181083;
  std::vector<uint8_t> data(kEager + kRendezvous);
  fill_pattern(1, 0, data);
  std::atomic<bool> sent{false};
  std::thread writer([&] {
    EXPECT_EQ(send_bytes(*pair.first, {data.data(), kEager}), static_cast<ssize_t>(kEager));
    EXPECT_EQ(send_bytes(*pair.first, {data.data() + kEager, kRendezvous}),
              static_cast<ssize_t>(kRendezvous));
    sent = true;
  });
  // Let both records be announced (returning the writer's slot as they come).
  while (pair.second->readable_bytes() < data.size()) std::this_thread::sleep_for(1ms);
  std::vector<uint8_t> buffer(data.size());
  ASSERT_EQ(receive_bytes(*pair.second, buffer, MSG_WAITALL), static_cast<ssize_t>(data.size()));
  EXPECT_EQ(first_mismatch(1, 0, buffer), -1);
  // The reader has everything and never calls in again.
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (!sent && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  const bool returned = sent;
  EXPECT_TRUE(returned) << "the writer's rendezvous was never answered";
  if (!returned) {
    // Unstick it for the join: the reader's engine makes progress.
    while (!sent) {
      pair.second->readable_bytes();
      std::this_thread::sleep_for(1ms);
    }
  }
  writer.join();
}

}  // namespace
}  // namespace qpsock::stream
