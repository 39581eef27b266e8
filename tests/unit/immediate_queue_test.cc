// The shm inbox's queue of immediates: what a peer pushes is popped in
// order, at most the capacity is held, and a tail that claims more (a broken
// or hostile peer) is refused for good, never read as new immediates.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cerrno>

#include "transport/shm/immediate_queue.h"

namespace qpsock::transport::shm {
namespace {

ArenaLayout four_of_eight_slots() {
  ArenaLayout layout{};
  layout.notification_capacity = 4;
  layout.inbox_slots = 8;
  return layout;
}

class ImmediateQueueTest : public ::testing::Test {
 protected:
  ArenaLayout layout_ = four_of_eight_slots();
  InboxHeader inbox_{};
  std::array<std::atomic<uint32_t>, 8> slots_{};
  std::atomic<uint64_t> head_{0};
  ImmediateSender sender_{&inbox_, slots_.data(), layout_, &head_};
  ImmediateReceiver receiver_{&inbox_, slots_.data(), layout_, &head_};
};

TEST_F(ImmediateQueueTest, PopsInPushOrderAndHoldsAtMostTheCapacity) {
  for (uint32_t round = 0; round < 3; ++round) {
    for (uint32_t value = 0; value < 4; ++value) EXPECT_TRUE(sender_.push(round * 10 + value));
    EXPECT_FALSE(sender_.push(99));
    uint32_t immediate = 0;
    for (uint32_t value = 0; value < 4; ++value) {
      ASSERT_EQ(receiver_.pop(immediate), 1);
      EXPECT_EQ(immediate, round * 10 + value);
    }
    EXPECT_EQ(receiver_.pop(immediate), 0);
  }
}

TEST_F(ImmediateQueueTest, ATailBeyondTheCapacityIsRefusedForGood) {
  uint32_t immediate = 0;
  ASSERT_TRUE(sender_.push(7));
  ASSERT_EQ(receiver_.pop(immediate), 1);
  // The peer's tail now claims far more than it may hold.
  inbox_.tail.store(head_.load() + 1000);
  EXPECT_EQ(receiver_.pop(immediate), -EPROTO);
  // Not once: every later pop refuses it (the slots' old values are not new immediates).
  for (int again = 0; again < 3; ++again) EXPECT_EQ(receiver_.pop(immediate), -EPROTO);
}

}  // namespace
}  // namespace qpsock::transport::shm
