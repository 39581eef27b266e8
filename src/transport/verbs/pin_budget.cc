// PinBudget: RLIMIT_MEMLOCK kept by qpsock, so that setups reserve before
// they pin (see the header).
#include "transport/verbs/pin_budget.h"

#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <new>

namespace qpsock::transport::verbs {
namespace {

// process_pin_budget's, once made.
std::atomic<PinBudget*> made_budget{nullptr};

constinit __attribute__((tls_model("initial-exec"))) thread_local PinningScope* current_scope =
    nullptr;

// CAP_IPC_LOCK lifts RLIMIT_MEMLOCK for ibv_reg_mr (ib_umem_get checks it).
bool has_ipc_lock_capability() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32))) != 0;
}

}  // namespace

std::optional<uint64_t> pinning_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY ||
      has_ipc_lock_capability())
    return std::nullopt;
  return uint64_t{limit.rlim_cur};
}

bool PinBudget::try_commit(uint64_t bytes) {
  const std::optional<uint64_t> limit = limit_();
  uint64_t committed = committed_.load(std::memory_order_acquire);
  for (;;) {
    if (limit && (bytes > *limit || committed > *limit - bytes)) return false;
    if (committed_.compare_exchange_weak(committed, committed + bytes, std::memory_order_acq_rel))
      return true;
  }
}

void PinBudget::release(uint64_t bytes) {
  uint64_t committed = committed_.load(std::memory_order_acquire);
  // Never below zero: a child's reset may have forgotten what its parent's
  // registrations (never released in the child) had committed.
  while (!committed_.compare_exchange_weak(committed, committed - std::min(bytes, committed),
                                           std::memory_order_acq_rel)) {
  }
}

PinBudget& process_pin_budget() {
  // Never destroyed: registrations may end from exit handlers after static destructors.
  alignas(PinBudget) static unsigned char storage[sizeof(PinBudget)];
  static PinBudget* const instance = [] {
    auto* made = ::new (storage) PinBudget(pinning_limit);
    made_budget.store(made, std::memory_order_release);
    return made;
  }();
  return *instance;
}

void reset_process_pin_budget_in_child() {
  if (PinBudget* budget = made_budget.load(std::memory_order_acquire)) budget->reset();
}

PinningScope::PinningScope(uint64_t bytes, PinBudget& budget) : budget_(budget) {
  granted_ = budget_.try_commit(bytes);
  if (granted_) left_ = bytes;
  current_scope = this;
}

PinningScope::~PinningScope() {
  budget_.release(left_);
  current_scope = nullptr;
}

uint64_t pinned_span(const void* address, size_t length) {
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uint64_t>(address);
  const uint64_t first = begin & ~(page - 1);
  const uint64_t end = (begin + length + page - 1) & ~(page - 1);
  return end - first;
}

int charge_pinning(const void* address, size_t length, PinCharge& charge) {
  const uint64_t bytes = pinned_span(address, length);
  PinningScope* scope = current_scope;
  if (scope != nullptr && !scope->granted_) return -ENOMEM;
  PinBudget& budget = scope != nullptr ? scope->budget_ : process_pin_budget();
  const uint64_t from_scope = scope != nullptr ? std::min(scope->left_, bytes) : 0;
  // What the reservation does not cover must fit beside everything else.
  if (bytes > from_scope && !budget.try_commit(bytes - from_scope)) return -ENOMEM;
  if (scope != nullptr) scope->left_ -= from_scope;
  charge = PinCharge(budget, bytes);
  return 0;
}

}  // namespace qpsock::transport::verbs
