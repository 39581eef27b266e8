#include "upgrade/forked_children.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "upgrade/connection_registry.h"
#include "upgrade/socket_identity.h"

namespace qpsock::upgrade {
namespace {

constexpr uint32_t kRemembered = 64;

struct ForkedChildren {
  std::atomic<uint32_t> forks_under_way{0};
  std::atomic<uint64_t> recorded{0};
  std::atomic<pid_t> pids[kRemembered] = {};
};

ForkedChildren& children() {
  // Never destroyed: forks may come from exit handlers.
  alignas(ForkedChildren) static unsigned char storage[sizeof(ForkedChildren)];
  static ForkedChildren* const instance = ::new (storage) ForkedChildren;
  return *instance;
}

}  // namespace

void fork_starting() { children().forks_under_way.fetch_add(1, std::memory_order_acq_rel); }

void fork_finished(pid_t result) {
  ForkedChildren& all = children();
  if (result == 0) {
    // The child's own children are its to count; its parent's fork is over.
    for (std::atomic<pid_t>& pid : all.pids) pid.store(0, std::memory_order_relaxed);
    all.recorded.store(0, std::memory_order_relaxed);
    all.forks_under_way.store(0, std::memory_order_release);
    return;
  }
  if (result > 0 && any_connections()) {
    const uint64_t slot = all.recorded.fetch_add(1, std::memory_order_acq_rel) % kRemembered;
    all.pids[slot].store(result, std::memory_order_release);
  }
  all.forks_under_way.fetch_sub(1, std::memory_order_acq_rel);
}

bool forked_child_holds_socket(uint64_t inode) {
  ForkedChildren& all = children();
  if (all.recorded.load(std::memory_order_acquire) == 0 &&
      all.forks_under_way.load(std::memory_order_acquire) == 0)
    return false;
  // A fork that has begun may already have copied the socket into its child
  // (a fork takes well under these 100 ms).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (all.forks_under_way.load(std::memory_order_acquire) != 0 &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  const uint64_t recorded = all.recorded.load(std::memory_order_acquire);
  const uint64_t count = recorded < kRemembered ? recorded : kRemembered;
  for (uint64_t index = 0; index < count; ++index) {
    const pid_t pid = all.pids[index].load(std::memory_order_acquire);
    if (pid > 0 && process_holds_socket(pid, inode)) return true;
  }
  return false;
}

bool forked_child_keeps_socket(uint64_t inode) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (forked_child_holds_socket(inode)) {
    if (std::chrono::steady_clock::now() >= give_up) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

}  // namespace qpsock::upgrade
