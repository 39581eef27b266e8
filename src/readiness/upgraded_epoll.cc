#include "readiness/upgraded_epoll.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "common/errno_guard.h"
#include "common/fd_indexed_array.h"
#include "libc/next_symbols.h"
#include "upgrade/connection_registry.h"
#include "upgrade/socket_upgrade.h"

namespace qpsock::readiness {
namespace {

// Per fd, read by close without a lock: whether it is an epoll fd we made a
// set for (kEpollSet), and how many registrations of it our sets took
// (counted up in kWatchUnit; never less than the sets hold, perhaps more: a
// close that finds none walks the sets for nothing, one that finds some
// always walks them).
constexpr uint32_t kEpollSet = 1;
constexpr uint32_t kWatchUnit = 2;

struct Registry {
  FdIndexedArray<std::atomic<uint32_t>> fd_state;
  std::mutex mutex;
  std::unordered_map<int, std::shared_ptr<EpollSet>> sets;
  // Sets that ever watched a socket: until then every call is the kernel's.
  std::atomic<bool> watching{false};
};

Registry& registry() {
  // Never destroyed: epoll calls may come from exit handlers after static destructors.
  alignas(Registry) static unsigned char storage[sizeof(Registry)];
  static Registry* instance = ::new (storage) Registry;
  return *instance;
}

bool is_epoll_set(const std::atomic<uint32_t>* state) {
  return state != nullptr && (state->load(std::memory_order_acquire) & kEpollSet) != 0;
}

std::shared_ptr<EpollSet> find_set(int epoll_fd) {
  Registry& all = registry();
  if (!is_epoll_set(all.fd_state.at(epoll_fd))) return nullptr;
  std::lock_guard lock(all.mutex);
  auto found = all.sets.find(epoll_fd);
  return found == all.sets.end() ? nullptr : found->second;
}

}  // namespace

void epoll_created(int epoll_fd) {
  Registry& all = registry();
  std::atomic<uint32_t>* state = all.fd_state.at(epoll_fd);
  if (state == nullptr) return;  // beyond the fd table: stays the kernel's
  std::lock_guard lock(all.mutex);
  all.sets[epoll_fd] = std::make_shared<EpollSet>(epoll_fd);
  state->fetch_or(kEpollSet, std::memory_order_release);
}

int epoll_control(int epoll_fd, int operation, int fd, epoll_event* event) {
  // A nested epoll set is remembered even before any socket is upgradable:
  // the sockets usually come later.
  std::atomic<uint32_t>* state = registry().fd_state.at(fd);
  const bool may_watch = upgrade::any_connections_or_offers() ||
                         registry().watching.load(std::memory_order_relaxed) || is_epoll_set(state);
  if (!may_watch) return next::epoll_ctl(epoll_fd, operation, fd, event);
  std::shared_ptr<EpollSet> set = find_set(epoll_fd);
  if (set == nullptr) return next::epoll_ctl(epoll_fd, operation, fd, event);
  int result = 0;
  switch (operation) {
    case EPOLL_CTL_ADD: {
      if (event == nullptr) break;
      // An event-driven server reads only once the client has sent: its
      // upgrade to a peer on another host starts when it watches the socket
      // (asynchronously), so that the bytes before the switch are few.
      upgrade::begin_server_upgrade_when_watched(fd);
      std::shared_ptr<upgrade::Connection> connection = upgrade::find_connection(fd);
      if (connection != nullptr && connection->phase() == upgrade::UpgradePhase::declined)
        connection.reset();
      std::shared_ptr<EpollSet> nested = connection == nullptr ? find_set(fd) : nullptr;
      if (connection == nullptr && nested == nullptr) break;
      registry().watching.store(true, std::memory_order_release);
      // Counted before the set holds it: a close never finds fewer than there are.
      if (state != nullptr) state->fetch_add(kWatchUnit, std::memory_order_acq_rel);
      result = set->add(fd, *event, std::move(connection), std::move(nested));
      if (result != 0 && state != nullptr) state->fetch_sub(kWatchUnit, std::memory_order_acq_rel);
      return result;
    }
    case EPOLL_CTL_MOD:
      if (event != nullptr && set->modify(fd, *event, result)) return result;
      break;
    case EPOLL_CTL_DEL:
      if (set->remove(fd, result)) {
        if (state != nullptr) state->fetch_sub(kWatchUnit, std::memory_order_acq_rel);
        return result;
      }
      break;
    default:
      break;
  }
  return next::epoll_ctl(epoll_fd, operation, fd, event);
}

int epoll_wait_through(int epoll_fd, epoll_event* events, int capacity, const timespec* timeout,
                       const sigset_t* mask, stream::FunctionRef<int()> kernel_wait) {
  Registry& all = registry();
  if (all.watching.load(std::memory_order_acquire)) {
    if (std::shared_ptr<EpollSet> set = find_set(epoll_fd))
      return set->wait(events, capacity, timeout, mask);
    return kernel_wait();
  }
  const int polled = kernel_wait();
  if (polled <= 0 || !all.watching.load(std::memory_order_acquire)) return polled;
  // A set began to hold registrations of ours while we slept.
  std::shared_ptr<EpollSet> set = find_set(epoll_fd);
  if (set == nullptr) return polled;
  ErrnoGuard errno_guard;
  const int kept = set->take_cookies(events, polled);
  if (kept > 0) return kept;
  return set->wait(events, capacity, timeout, mask);
}

int highest_epoll_set_fd() {
  Registry& all = registry();
  std::lock_guard lock(all.mutex);
  int highest = -1;
  for (const auto& [fd, set] : all.sets) highest = std::max(highest, fd);
  return highest;
}

void fd_closing(int fd) {
  Registry& all = registry();
  std::atomic<uint32_t>* state = all.fd_state.at(fd);
  // An fd beyond the array was never watched here, nor a set.
  if (state == nullptr) return;
  const uint32_t seen = state->load(std::memory_order_acquire);
  const bool closing_set = (seen & kEpollSet) != 0;
  if (!closing_set && seen < kWatchUnit) return;
  ErrnoGuard errno_guard;
  std::shared_ptr<EpollSet> closed;
  // The sets, copied out of the lock: a few (the usual) without an allocation.
  std::array<std::shared_ptr<EpollSet>, 4> few;
  size_t few_count = 0;
  std::vector<std::shared_ptr<EpollSet>> more;
  {
    std::lock_guard lock(all.mutex);
    // Every set lets go of the number below (or keeps a dup's registration
    // under no number): it is watched nowhere now.
    state->store(0, std::memory_order_release);
    if (closing_set) {
      auto found = all.sets.find(fd);
      if (found != all.sets.end()) {
        closed = std::move(found->second);
        all.sets.erase(found);
      }
    }
    if (all.watching.load(std::memory_order_relaxed)) {
      for (const auto& [epoll_fd, set] : all.sets) {
        if (few_count < few.size())
          few[few_count++] = set;
        else
          more.push_back(set);
      }
    }
  }
  // Outside the registry's lock: a set's lock is taken under no other.
  for (size_t index = 0; index < few_count; ++index) few[index]->fd_closing(fd);
  for (const auto& set : more) set->fd_closing(fd);
}

std::shared_ptr<EpollSet> active_epoll_set(int fd) {
  if (!registry().watching.load(std::memory_order_relaxed)) return nullptr;
  std::shared_ptr<EpollSet> set = find_set(fd);
  return set != nullptr && set->active() ? set : nullptr;
}

}  // namespace qpsock::readiness
