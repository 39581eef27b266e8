// How long a blocking wait stays awake: spin_time at least, long enough for
// nearly all recent answers when they came within spin_limit, back down when
// the connection goes idle, and never past the limit.
#include <gtest/gtest.h>

#include "stream/spin_budget.h"

namespace qpsock::stream {
namespace {

using namespace std::chrono_literals;

TEST(SpinBudget, StartsAtTheFloor) {
  EXPECT_EQ(SpinBudget(20us, 1ms).next(), 20us);
}

TEST(SpinBudget, LearnsHowLongAnswersTakeWithinTheLimit) {
  SpinBudget budget(20us, 1ms);
  // Answers after 300 us, each after a sleep at first: the spin grows to
  // cover them, with a quarter to spare.
  for (int wait = 0; wait < 20; ++wait) budget.on_answered(300us);
  EXPECT_EQ(budget.next(), 375us);
  // One quick answer does not cut it below what the usual one needs; it
  // widens it (answers now scatter), to three times their mean at most.
  budget.on_answered(10us);
  EXPECT_GT(budget.next(), 300us);
  EXPECT_LE(budget.next(), 3 * 300us);
}

TEST(SpinBudget, OneOddAnswerDoesNotKeepEveryWaitSpinningToTheLimit) {
  // Where a wakeup costs microseconds, spinning up to spin_limit on every
  // wait for one slow answer among quick ones wastes a core: the spin stays
  // within three times the mean.
  SpinBudget budget(20us, 1ms);
  for (int wait = 0; wait < 20; ++wait) budget.on_answered(10us);
  budget.on_answered(900us);  // the mean becomes about 121 us
  EXPECT_LT(budget.next(), 370us);
}

TEST(SpinBudget, NeverPastTheLimitNorBelowTheFloor) {
  SpinBudget budget(20us, 1ms);
  for (int wait = 0; wait < 20; ++wait) budget.on_answered(950us);
  EXPECT_EQ(budget.next(), 1ms);
  // Quick answers end their waits before any budget matters; in time it
  // falls to the floor.
  for (int wait = 0; wait < 60; ++wait) budget.on_answered(1us);
  EXPECT_EQ(budget.next(), 20us);
}

TEST(SpinBudget, ScatteredAnswersAreCoveredNotOnlyTheirMean) {
  // Under emulation answers scatter by half their time and more: a spin of
  // their mean and a quarter would sleep through every slow one, and each
  // sleep costs a wakeup as long as the answer.
  SpinBudget budget(20us, 1ms);
  for (int wait = 0; wait < 40; ++wait) budget.on_answered(wait % 2 == 0 ? 100us : 300us);
  EXPECT_GE(budget.next(), 300us);
  EXPECT_LT(budget.next(), 1ms);
}

TEST(SpinBudget, AnIdleConnectionFallsBackToTheFloor) {
  SpinBudget budget(20us, 1ms);
  for (int wait = 0; wait < 20; ++wait) budget.on_answered(400us);
  ASSERT_EQ(budget.next(), 500us);
  // One long wait among short ones halves what they taught, no more.
  budget.on_answered(50ms);
  EXPECT_EQ(budget.next(), 250us);
  for (int wait = 0; wait < 10; ++wait) budget.on_answered(2s);
  EXPECT_EQ(budget.next(), 20us);
}

TEST(SpinBudget, ALimitAtOrBelowTheFloorTurnsAdaptingOff) {
  SpinBudget off(20us, 0us);
  for (int wait = 0; wait < 20; ++wait) off.on_answered(300us);
  EXPECT_EQ(off.next(), 20us);
  SpinBudget busy(1s, 1ms);  // spin_time = 1s busy-polls always
  busy.on_answered(5us);
  EXPECT_EQ(busy.next(), 1s);
}

}  // namespace
}  // namespace qpsock::stream
