// The shm transport while its peer closes: every immediate the peer pushed
// before its disconnect reaches our poll before the link's error, however
// the two threads interleave. (A poll that looked for the disconnect after
// draining the inbox could see the close but not what came just before it:
// a forked echo server's last bytes and its end of stream were lost so, one
// run in a dozen under load.)
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <thread>

#include "unit/shm_test_support.h"

namespace qpsock::transport::shm {
namespace {

using stream::Completion;
using stream::CompletionKind;

constexpr uint32_t kImmediatesPerRound = 64;
constexpr int kRounds = 2000;

ShmOptions race_options() {
  ShmOptions options;
  options.ring_size = 64 << 10;
  options.notification_capacity = kImmediatesPerRound;
  options.send_queue_depth = kImmediatesPerRound + 4;
  options.setup_timeout = std::chrono::milliseconds{5000};
  return options;
}

TEST(ShmTransportCloseRace, EveryImmediateBeforeADisconnectComesBeforeTheError) {
  int short_rounds = 0;
  for (int round = 0; round < kRounds; ++round) {
    testing::SocketPair sockets;
    std::unique_ptr<ShmTransport> peer;
    std::unique_ptr<ShmTransport> ours;
    ASSERT_NO_FATAL_FAILURE(testing::establish_both(sockets, race_options(), peer, ours));
    std::atomic<bool> go{false};
    // The peer pushes its immediates, the last one while we are polling,
    // then disconnects at once.
    std::atomic<int> refused_posts{0};
    std::thread closer([&] {
      while (!go.load(std::memory_order_acquire)) {
      }
      for (uint32_t value = 0; value < kImmediatesPerRound; ++value)
        if (peer->post_write({}, {0, 0}, value, 0) != 0) ++refused_posts;
      peer->disconnect();
    });
    uint32_t arrived = 0;
    bool error_seen = false;
    bool out_of_order = false;
    std::array<Completion, 8> batch;
    go.store(true, std::memory_order_release);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{10};
    while (!error_seen && std::chrono::steady_clock::now() < deadline) {
      const int count = ours->poll(batch);
      EXPECT_GE(count, 0);
      for (int index = 0; index < count; ++index) {
        if (batch[index].kind != CompletionKind::arrived) out_of_order = true;
        if (batch[index].status != 0) {
          error_seen = true;
          if (index != count - 1) out_of_order = true;  // nothing comes after the error
          continue;
        }
        if (batch[index].immediate != arrived) out_of_order = true;
        ++arrived;
      }
    }
    closer.join();
    ASSERT_TRUE(error_seen) << "round " << round << ": the disconnect never reached the poll";
    ASSERT_EQ(refused_posts.load(), 0) << "round " << round;
    ASSERT_FALSE(out_of_order) << "round " << round << ": arrivals out of push order, or after the error";
    if (arrived != kImmediatesPerRound) ++short_rounds;
  }
  EXPECT_EQ(short_rounds, 0) << "rounds whose error came before all " << kImmediatesPerRound
                             << " immediates, of " << kRounds;
}

}  // namespace
}  // namespace qpsock::transport::shm
