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
    recent_ /= 2;
  } else {
    // A moving average, so that one quick answer does not cut the spin below
    // what the usual answer needs.
    recent_ = recent_.count() == 0 ? waited : (3 * recent_ + waited) / 4;
  }
  budget_ = std::clamp(recent_ + recent_ / 4, floor_, limit_);
}

}  // namespace qpsock::stream
