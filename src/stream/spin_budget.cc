#include "stream/spin_budget.h"

#include <algorithm>

namespace qpsock::stream {

SpinBudget::SpinBudget(Duration floor, Duration limit)
    : floor_(floor), limit_(std::max(floor, limit)), budget_(floor) {}

void SpinBudget::on_answered(Duration waited) {
  if (limit_ <= floor_) return;  // adapting is off
  if (waited > limit_) {
    // Not worth staying awake for: back toward the floor, by halves, so that
    // one long wait among short ones does not undo what they taught.
    mean_ /= 2;
    deviation_ /= 2;
  } else if (mean_.count() == 0) {
    mean_ = waited;
    deviation_ = waited / 2;
  } else {
    // RFC 6298's gains (1/4 for the deviation, 1/8 for the mean): one quick
    // answer does not cut the spin below what the usual one needs.
    const Duration miss = waited > mean_ ? waited - mean_ : mean_ - waited;
    deviation_ = (3 * deviation_ + miss) / 4;
    mean_ = (7 * mean_ + waited) / 8;
  }
  // A quarter of the mean to spare at least: answers that never scattered
  // so far still do now and then. Twice the mean at most: one odd answer
  // (a 1 ms one among 10 us ones) must not keep every later wait spinning
  // until spin_limit, where a wakeup costs microseconds (real hardware).
  const Duration margin = std::clamp(4 * deviation_, mean_ / 4, 2 * mean_);
  budget_ = std::clamp(mean_ + margin, floor_, limit_);
}

}  // namespace qpsock::stream
