// The pinning budget: a connection's setup reserves what it pins before it
// pins anything, so that setups running at once never all fail for
// RLIMIT_MEMLOCK; registrations outside a setup fit beside the reservations.
#include "transport/verbs/pin_budget.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <thread>
#include <vector>

namespace qpsock::transport::verbs {
namespace {

const uint64_t kPage = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));

// The limit the tests' budgets read (a LimitSource is a plain function).
std::atomic<uint64_t> test_limit{0};
std::optional<uint64_t> read_test_limit() { return test_limit.load(); }

// Page-aligned memory to charge registrations of (never registered).
alignas(65536) unsigned char memory[64 * 65536];

class PinBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override { test_limit = 16 * kPage; }
  PinBudget budget_{read_test_limit};
};

TEST_F(PinBudgetTest, CommitsUpToTheLimitAndNoFurther) {
  EXPECT_TRUE(budget_.try_commit(10 * kPage));
  EXPECT_TRUE(budget_.try_commit(6 * kPage));
  EXPECT_FALSE(budget_.try_commit(1));
  EXPECT_EQ(budget_.committed(), 16 * kPage);
  budget_.release(6 * kPage);
  EXPECT_TRUE(budget_.try_commit(kPage));
  EXPECT_FALSE(budget_.try_commit(16 * kPage));
  // A limit read anew: lowered below what is committed, nothing more fits.
  test_limit = 4 * kPage;
  EXPECT_FALSE(budget_.try_commit(1));
  budget_.release(100 * kPage);  // never below zero
  EXPECT_EQ(budget_.committed(), 0u);
}

TEST_F(PinBudgetTest, PinnedSpanCoversWholePages) {
  EXPECT_EQ(pinned_span(memory, 1), kPage);
  EXPECT_EQ(pinned_span(memory, kPage), kPage);
  EXPECT_EQ(pinned_span(memory + kPage - 1, 2), 2 * kPage);
  EXPECT_EQ(pinned_span(memory + 10, 3 * kPage), 4 * kPage);
}

TEST_F(PinBudgetTest, ASetupDrawsOnItsReservationAndGivesTheRestBack) {
  {
    PinningScope setup(8 * kPage, budget_);
    ASSERT_TRUE(setup.granted());
    EXPECT_EQ(budget_.committed(), 8 * kPage);
    PinCharge ring, staging;
    ASSERT_EQ(charge_pinning(memory, 4 * kPage, ring), 0);
    ASSERT_EQ(charge_pinning(memory + 4 * kPage, 2 * kPage, staging), 0);
    // Drawn from the reservation: nothing more committed.
    EXPECT_EQ(budget_.committed(), 8 * kPage);
    // Beyond the reservation, the budget pays if it can.
    PinCharge beyond;
    ASSERT_EQ(charge_pinning(memory, 4 * kPage, beyond), 0);
    EXPECT_EQ(budget_.committed(), 10 * kPage);
    PinCharge too_much;
    EXPECT_EQ(charge_pinning(memory, 7 * kPage, too_much), -ENOMEM);
    EXPECT_EQ(too_much.bytes(), 0u);
    EXPECT_EQ(budget_.committed(), 10 * kPage);
  }
  // The charges ended with their scope here; so did the unused reservation.
  EXPECT_EQ(budget_.committed(), 0u);
}

TEST_F(PinBudgetTest, ARefusedSetupPinsNothing) {
  ASSERT_TRUE(budget_.try_commit(12 * kPage));
  PinningScope setup(8 * kPage, budget_);
  EXPECT_FALSE(setup.granted());
  PinCharge ring;
  // Even what would fit alone: the setup could not have finished.
  EXPECT_EQ(charge_pinning(memory, kPage, ring), -ENOMEM);
  EXPECT_EQ(budget_.committed(), 12 * kPage);
}

// The race the budget exists for: setups that each need more than half of
// the limit start at once; one is granted and pins all it needs, the others
// are refused before they pin anything.
TEST_F(PinBudgetTest, SetupsRacingForTheLimitNeverAllFail) {
  constexpr int kSetups = 8;
  for (int round = 0; round < 50; ++round) {
    std::atomic<int> ready{0}, tried{0}, finished{0}, refused_at_once{0};
    std::vector<std::thread> setups;
    for (int index = 0; index < kSetups; ++index) {
      setups.emplace_back([&] {
        ++ready;
        while (ready.load() < kSetups) std::this_thread::yield();
        PinningScope setup(10 * kPage, budget_);
        PinCharge ring, staging;
        const int first = charge_pinning(memory, 5 * kPage, ring);
        const int second = first == 0 ? charge_pinning(memory, 5 * kPage, staging) : first;
        if (second == 0) ++finished;
        else if (first != 0) ++refused_at_once;
        // The one that finished holds its pins until every other has tried.
        if (second == 0)
          while (tried.load() < kSetups - 1) std::this_thread::yield();
        else
          ++tried;
      });
    }
    for (auto& setup : setups) setup.join();
    EXPECT_EQ(finished.load(), 1);
    EXPECT_EQ(refused_at_once.load(), kSetups - 1);
    EXPECT_EQ(budget_.committed(), 0u);
  }
}

TEST(ProcessPinBudget, ARegistrationOutsideASetupIsChargedAndGivenBack) {
  PinBudget& budget = process_pin_budget();
  const uint64_t before = budget.committed();
  {
    PinCharge charge;
    ASSERT_EQ(charge_pinning(memory, kPage, charge), 0);  // any limit has room for a page
    EXPECT_EQ(budget.committed(), before + kPage);
  }
  EXPECT_EQ(budget.committed(), before);
}

}  // namespace
}  // namespace qpsock::transport::verbs
