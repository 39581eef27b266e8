// Where the peer may share our core, a wait stops spinning once two yields
// in a row ran another thread, for a pause; one long yield (the host
// preempting a virtual CPU) does not stop it, and transports whose peer
// cannot share the core are never paused.
#include <gtest/gtest.h>

#include "stream/core_sharing_backoff.h"

namespace qpsock::stream {
namespace {

using namespace std::chrono_literals;
using Clock = CoreSharingBackoff::Clock;

TEST(CoreSharingBackoff, QuickYieldsKeepSpinning) {
  CoreSharingBackoff backoff(true);
  Clock::time_point now{1s};
  for (int yield = 0; yield < 100; ++yield) {
    backoff.on_yield(now, now + 2us);
    now += 20us;
    EXPECT_TRUE(backoff.may_spin(now));
    EXPECT_FALSE(backoff.checking());
  }
}

TEST(CoreSharingBackoff, OneLongYieldIsCheckedNotObeyed) {
  CoreSharingBackoff backoff(true);
  const Clock::time_point now{1s};
  backoff.on_yield(now, now + 300us);
  EXPECT_TRUE(backoff.checking());  // the next poll yields again
  EXPECT_TRUE(backoff.may_spin(now + 300us));
  // The check comes back at once: it was the host, not a thread of ours.
  backoff.on_yield(now + 301us, now + 302us);
  EXPECT_FALSE(backoff.checking());
  EXPECT_TRUE(backoff.may_spin(now + 303us));
}

TEST(CoreSharingBackoff, TwoLongYieldsInARowPauseSpinning) {
  CoreSharingBackoff backoff(true);
  const Clock::time_point now{1s};
  backoff.on_yield(now, now + 30us);
  backoff.on_yield(now + 31us, now + 60us);
  EXPECT_FALSE(backoff.may_spin(now + 61us));
  EXPECT_FALSE(backoff.may_spin(now + 60us + CoreSharingBackoff::kPause - 1us));
  // Then it tries again.
  EXPECT_TRUE(backoff.may_spin(now + 60us + CoreSharingBackoff::kPause));
}

TEST(CoreSharingBackoff, TheTwoLongYieldsMayBeInDifferentWaits) {
  // Sharing a core, each wait spins 20 us, yields (the peer runs and
  // answers) and ends: its first yield is its last.
  CoreSharingBackoff backoff(true);
  Clock::time_point now{1s};
  backoff.on_yield(now, now + 25us);  // a wait's only yield
  now += 40us;
  EXPECT_TRUE(backoff.may_spin(now));  // the next wait spins
  backoff.on_yield(now, now + 25us);  // and its yield ran another thread too
  EXPECT_FALSE(backoff.may_spin(now + 26us));
}

TEST(CoreSharingBackoff, NeverPausesWhereThePeerCannotShareTheCore) {
  // Between hosts, and over Soft-RoCE, whose kernel threads run after a
  // yield as well: long yields say nothing about the peer.
  CoreSharingBackoff backoff(false);
  Clock::time_point now{1s};
  for (int yield = 0; yield < 10; ++yield) {
    backoff.on_yield(now, now + 1ms);
    now += 2ms;
    EXPECT_TRUE(backoff.may_spin(now));
    EXPECT_FALSE(backoff.checking());
  }
}

}  // namespace
}  // namespace qpsock::stream
