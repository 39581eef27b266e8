// What this process pins with ibv_reg_mr, kept against RLIMIT_MEMLOCK by
// qpsock itself. The kernel refuses only the one registration that would
// pass the limit, so connection setups that run at once could each pin part
// of what they need and all fail; here a setup reserves all it will pin
// before it pins anything (PinningScope), and a registration outside a setup
// (a rendezvous source, a larger bounce buffer) is refused before the kernel
// sees it unless it fits beside what is pinned and reserved. Memory pinned
// by others in the process (the kernel's own queue buffers, another verbs
// user) is not counted: the kernel may still refuse, as before.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>

namespace qpsock::transport::verbs {

// A count of committed bytes (pinned, or reserved to be) under a limit.
class PinBudget {
 public:
  // The bytes that may be pinned now; nullopt: no limit.
  using LimitSource = std::optional<uint64_t> (*)();
  explicit PinBudget(LimitSource limit) : limit_(limit) {}
  PinBudget(const PinBudget&) = delete;
  PinBudget& operator=(const PinBudget&) = delete;

  // Commits `bytes` if the committed total stays within the limit.
  bool try_commit(uint64_t bytes);
  void release(uint64_t bytes);
  uint64_t committed() const { return committed_.load(std::memory_order_acquire); }
  // In a forked child: its address space pins nothing yet.
  void reset() {
    // No write when there is nothing to forget (a forked child's page stays shared).
    if (committed_.load(std::memory_order_relaxed) != 0) committed_.store(0, std::memory_order_release);
  }

 private:
  LimitSource limit_;
  std::atomic<uint64_t> committed_{0};
};

// This process's budget: RLIMIT_MEMLOCK's soft limit, none with
// CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK.
PinBudget& process_pin_budget();
// A forked child's: its address space pins nothing. Makes no budget where
// none was made.
void reset_process_pin_budget_in_child();
// The bytes this process may pin (RLIMIT_MEMLOCK's soft limit); nullopt
// with CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK.
std::optional<uint64_t> pinning_limit();

class PinCharge;

// The setup of one connection on this thread: reserves `bytes` from
// `budget` if they fit. While it lives, registrations this thread makes draw
// on the reservation (and on the budget beyond it), or, if it was refused,
// fail at once without pinning. What is left is given back at its end.
// Not nested.
class PinningScope {
 public:
  explicit PinningScope(uint64_t bytes, PinBudget& budget = process_pin_budget());
  ~PinningScope();
  PinningScope(const PinningScope&) = delete;
  PinningScope& operator=(const PinningScope&) = delete;

  bool granted() const { return granted_; }

 private:
  friend int charge_pinning(const void*, size_t, PinCharge&);
  PinBudget& budget_;
  uint64_t left_ = 0;
  bool granted_ = false;
};

// What one registration has committed, given back when it ends.
class PinCharge {
 public:
  PinCharge() = default;
  PinCharge(PinBudget& budget, uint64_t bytes) : budget_(&budget), bytes_(bytes) {}
  PinCharge(PinCharge&& other) noexcept
      : budget_(std::exchange(other.budget_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  PinCharge& operator=(PinCharge&& other) noexcept {
    std::swap(budget_, other.budget_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  ~PinCharge() {
    if (budget_ != nullptr) budget_->release(bytes_);
  }
  uint64_t bytes() const { return bytes_; }

 private:
  PinBudget* budget_ = nullptr;
  uint64_t bytes_ = 0;
};

// The bytes ibv_reg_mr pins for [address, address + length) (whole pages).
uint64_t pinned_span(const void* address, size_t length);
// Before a registration of [address, address + length): charges its pinned
// span to this thread's scope or to the process's budget. 0, or -ENOMEM
// (nothing charged) if it does not fit or the scope was refused.
int charge_pinning(const void* address, size_t length, PinCharge& charge);

}  // namespace qpsock::transport::verbs
