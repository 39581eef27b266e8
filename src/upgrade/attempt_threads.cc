#include "upgrade/attempt_threads.h"

#include <memory>
#include <mutex>
#include <utility>

#include "upgrade/agent_thread.h"

namespace qpsock::upgrade {
namespace {

// The attempts of one kind under way on their own threads. A forked child
// has none of those threads: its count starts again from 0.
template <AttemptKind Kind>
class AttemptSlots : public HelperLock {
 public:
  bool take() {
    std::lock_guard lock(mutex_);
    if (under_way_ >= kMostAttemptsAtOnce) return false;
    ++under_way_;
    return true;
  }
  void give_back() {
    std::lock_guard lock(mutex_);
    if (under_way_ > 0) --under_way_;
  }
  int under_way() {
    std::lock_guard lock(mutex_);
    return under_way_;
  }
  void forget_after_fork() { under_way_ = 0; }

 private:
  int under_way_ = 0;
};

template <AttemptKind Kind>
AttemptSlots<Kind>& slots() {
  return fork_aware_instance<AttemptSlots<Kind>>();
}

template <AttemptKind Kind>
void* run_attempt(void* argument) {
  // Owned from here: destroyed (with what the attempt captured) when it ends.
  const std::unique_ptr<std::function<void()>> attempt(static_cast<std::function<void()>*>(argument));
  (*attempt)();
  slots<Kind>().give_back();
  return nullptr;
}

template <AttemptKind Kind>
bool start(const char* name, std::function<void()>& attempt) {
  if (!slots<Kind>().take()) return false;
  auto owned = std::make_unique<std::function<void()>>(std::move(attempt));
  if (start_agent_thread(name, &run_attempt<Kind>, owned.get()) != 0) {
    attempt = std::move(*owned);
    slots<Kind>().give_back();
    return false;
  }
  static_cast<void>(owned.release());  // the thread's now
  return true;
}

}  // namespace

bool run_attempt_on_own_thread(AttemptKind kind, std::function<void()>& attempt) {
  return kind == AttemptKind::server_connect
             ? start<AttemptKind::server_connect>("qpsock-connect", attempt)
             : start<AttemptKind::client_accept>("qpsock-accept", attempt);
}

void prepare_attempt_threads() {
  slots<AttemptKind::server_connect>();
  slots<AttemptKind::client_accept>();
}

int attempts_under_way(AttemptKind kind) {
  return kind == AttemptKind::server_connect ? slots<AttemptKind::server_connect>().under_way()
                                             : slots<AttemptKind::client_accept>().under_way();
}

}  // namespace qpsock::upgrade
