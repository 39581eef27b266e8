// The shm transport while its peer closes: every immediate the peer pushed
// before its disconnect reaches our poll before the link's error, however
// the two threads interleave. (A poll that looked for the disconnect after
// draining the inbox could see the close but not what came just before it:
// a forked echo server's last bytes and its end of stream were lost so, one
// run in a dozen under load.)
#include <gtest/gtest.h>

#include <array>
#include <atomic>
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
    std::thread closer([&] {
      while (!go.load(std::memory_order_acquire)) {
      }
      for (uint32_t value = 0; value < kImmediatesPerRound; ++value)
        ASSERT_EQ(peer->post_write({}, {0, 0}, value, 0), 0);
      peer->disconnect();
    });
    uint32_t arrived = 0;
    bool error_seen = false;
    std::array<Completion, 8> batch;
    go.store(true, std::memory_order_release);
    while (!error_seen) {
      const int count = ours->poll(batch);
      ASSERT_GE(count, 0);
      for (int index = 0; index < count; ++index) {
        ASSERT_EQ(batch[index].kind, CompletionKind::arrived);
        if (batch[index].status != 0) {
          error_seen = true;
          EXPECT_EQ(index, count - 1) << "nothing comes after the link's error";
          continue;
        }
        EXPECT_EQ(batch[index].immediate, arrived) << "in the order pushed";
        ++arrived;
      }
    }
    closer.join();
    if (arrived != kImmediatesPerRound) ++short_rounds;
  }
  EXPECT_EQ(short_rounds, 0) << "rounds whose error came before all " << kImmediatesPerRound
                             << " immediates, of " << kRounds;
}

}  // namespace
}  // namespace qpsock::transport::shm
