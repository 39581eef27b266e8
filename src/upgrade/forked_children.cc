#include "upgrade/forked_children.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "common/log.h"
#include "common/wiped_on_fork.h"
#include "upgrade/connection.h"
#include "upgrade/connection_registry.h"
#include "upgrade/socket_identity.h"

namespace qpsock::upgrade {
namespace {

constexpr uint32_t kRemembered = 64;

struct ForkedChildren {
  std::atomic<uint64_t> forks_begun{0};
  std::atomic<uint64_t> forks_ended{0};
  std::atomic<uint64_t> recorded{0};
  std::atomic<pid_t> pids[kRemembered] = {};
};

// A child starts with none of its own: zeroed at fork, and never written by
// a forking server's parent at the cost of a copy-on-write fault.
using ForkedChildrenMemory = WipedOnFork<ForkedChildren>;

ForkedChildren& children() { return ForkedChildrenMemory::get(); }

}  // namespace

void fork_starting() {
  children().forks_begun.fetch_add(1, std::memory_order_seq_cst);
}

ForkCounts fork_counts() {
  ForkedChildren& all = children();
  // Ended first: a fork that ends between the two loads is then seen begun and not ended.
  const uint64_t ended = all.forks_ended.load(std::memory_order_seq_cst);
  return {all.forks_begun.load(std::memory_order_seq_cst), ended};
}

void fork_finished(pid_t result) {
  ForkedChildren& all = children();
  if (result == 0) {
    // The child's own children are its to count; its parent's fork is over.
    ForkedChildrenMemory::reset_in_child();
    return;
  }
  if (result > 0 && any_connections_or_offers()) {
    const uint64_t slot = all.recorded.fetch_add(1, std::memory_order_acq_rel) % kRemembered;
    all.pids[slot].store(result, std::memory_order_release);
  }
  all.forks_ended.fetch_add(1, std::memory_order_seq_cst);
}

namespace {

// The pids of the remembered children that hold the socket now, after any
// fork under way has finished (a fork that has begun may already have copied
// the socket into its child; a fork takes well under these 100 ms).
uint32_t children_holding(uint64_t inode, pid_t (&holders)[kRemembered]) {
  ForkedChildren& all = children();
  if (!has_forked_children()) return 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (fork_counts().fork_under_way() && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  const uint64_t recorded = all.recorded.load(std::memory_order_acquire);
  const uint64_t count = recorded < kRemembered ? recorded : kRemembered;
  uint32_t found = 0;
  for (uint64_t index = 0; index < count; ++index) {
    const pid_t pid = all.pids[index].load(std::memory_order_acquire);
    if (pid > 0 && process_holds_socket(pid, inode)) holders[found++] = pid;
  }
  return found;
}

}  // namespace

bool has_forked_children() {
  return children().recorded.load(std::memory_order_acquire) != 0 || fork_counts().fork_under_way();
}

bool forked_child_keeps_socket(uint64_t inode) {
  // Only the children holding the socket now are waited for: a shell forks a
  // new one for every command substitution, so some child or other may hold
  // it at every moment while each lets it go within milliseconds, and
  // waiting for "no child at all" would keep every busy script on TCP.
  pid_t holders[kRemembered];
  uint32_t count = children_holding(inode, holders);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (count > 0) {
    if (std::chrono::steady_clock::now() >= give_up) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    uint32_t still = 0;
    for (uint32_t index = 0; index < count; ++index)
      if (process_holds_socket(holders[index], inode)) holders[still++] = holders[index];
    count = still;
  }
  return false;
}

bool declined_for_a_forked_child(Connection& connection, int tcp_fd, uint64_t tcp_socket_inode) {
  if (!forked_child_keeps_socket(tcp_socket_inode)) return false;
  QPSOCK_LOG(info, "fd %d: a child process forked since the connection was made holds the "
             "socket; the connection stays on TCP", tcp_fd);
  connection.decline("a forked child holds the socket");
  return true;
}

bool declined_for_a_fork_since_claimed(Connection& connection, int tcp_fd) {
  if (!connection.forked_since_claimed()) return false;
  QPSOCK_LOG(info, "fd %d: this process forked (or started a program) after the connection's "
             "first I/O and before its upgrade began; the child may use the socket: the "
             "connection stays on TCP", tcp_fd);
  connection.decline("a child was forked before its upgrade began");
  return true;
}

}  // namespace qpsock::upgrade
