#include "upgrade/attempt_threads.h"

#include <memory>
#include <mutex>
#include <utility>

#include "common/helper_thread.h"

namespace qpsock::upgrade {
namespace {

constexpr const char* kThreadNames[] = {"qpsock-connect", "qpsock-accept"};  // [AttemptKind]

// The attempts of each kind under way on their own threads. A forked child
// has none of those threads: its counts start again from 0.
class AttemptSlots : public HelperLock {
 public:
  bool take(AttemptKind kind) {
    std::lock_guard lock(mutex_);
    int& count = under_way_[static_cast<int>(kind)];
    if (count >= kMostAttemptsAtOnce) return false;
    ++count;
    return true;
  }
  void give_back(AttemptKind kind) {
    std::lock_guard lock(mutex_);
    int& count = under_way_[static_cast<int>(kind)];
    if (count > 0) --count;
  }
  int under_way(AttemptKind kind) {
    std::lock_guard lock(mutex_);
    return under_way_[static_cast<int>(kind)];
  }
  void forget_after_fork() { under_way_[0] = under_way_[1] = 0; }

 private:
  int under_way_[2] = {0, 0};  // [AttemptKind]
};

AttemptSlots& slots() { return fork_aware_instance<AttemptSlots>(); }

struct Attempt {
  AttemptKind kind;
  std::function<void()> run;
};

void* run_attempt(void* argument) {
  // Owned from here: destroyed (with what the attempt captured) when it ends.
  const std::unique_ptr<Attempt> attempt(static_cast<Attempt*>(argument));
  attempt->run();
  slots().give_back(attempt->kind);
  return nullptr;
}

}  // namespace

bool run_attempt_on_own_thread(AttemptKind kind, std::function<void()>& attempt) {
  if (!slots().take(kind)) return false;
  auto owned = std::make_unique<Attempt>(Attempt{kind, std::move(attempt)});
  if (start_helper_thread(kThreadNames[static_cast<int>(kind)], &run_attempt, owned.get()) != 0) {
    attempt = std::move(owned->run);
    slots().give_back(kind);
    return false;
  }
  static_cast<void>(owned.release());  // the thread's now
  return true;
}

void prepare_attempt_threads() { slots(); }

int attempts_under_way(AttemptKind kind) { return slots().under_way(kind); }

}  // namespace qpsock::upgrade
