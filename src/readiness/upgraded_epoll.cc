#include "readiness/upgraded_epoll.h"

#include <algorithm>
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

struct Registry {
  // Which fds are epoll fds we made a set for: close looks here without a lock.
  FdIndexedArray<std::atomic<bool>> is_epoll_set;
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

std::shared_ptr<EpollSet> find_set(int epoll_fd) {
  Registry& all = registry();
  std::atomic<bool>* flag = all.is_epoll_set.at(epoll_fd);
  if (flag == nullptr || !flag->load(std::memory_order_acquire)) return nullptr;
  std::lock_guard lock(all.mutex);
  auto found = all.sets.find(epoll_fd);
  return found == all.sets.end() ? nullptr : found->second;
}

}  // namespace

void epoll_created(int epoll_fd) {
  Registry& all = registry();
  std::atomic<bool>* flag = all.is_epoll_set.at(epoll_fd);
  if (flag == nullptr) return;  // beyond the fd table: stays the kernel's
  std::lock_guard lock(all.mutex);
  all.sets[epoll_fd] = std::make_shared<EpollSet>(epoll_fd);
  flag->store(true, std::memory_order_release);
}

int epoll_control(int epoll_fd, int operation, int fd, epoll_event* event) {
  // A nested epoll set is remembered even before any socket is upgradable:
  // the sockets usually come later.
  std::atomic<bool>* nested_flag = registry().is_epoll_set.at(fd);
  const bool may_watch = upgrade::any_connections() ||
                         registry().watching.load(std::memory_order_relaxed) ||
                         (nested_flag != nullptr && nested_flag->load(std::memory_order_acquire));
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
      return set->add(fd, *event, std::move(connection), std::move(nested));
    }
    case EPOLL_CTL_MOD:
      if (event != nullptr && set->modify(fd, *event, result)) return result;
      break;
    case EPOLL_CTL_DEL:
      if (set->remove(fd, result)) return result;
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
  const int kept = set->take_cookies(events, polled, capacity);
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
  std::atomic<bool>* flag = all.is_epoll_set.at(fd);
  const bool closing_set = flag != nullptr && flag->load(std::memory_order_acquire);
  if (!closing_set && !all.watching.load(std::memory_order_relaxed)) return;
  ErrnoGuard errno_guard;
  std::shared_ptr<EpollSet> closed;
  std::vector<std::shared_ptr<EpollSet>> sets;
  {
    std::lock_guard lock(all.mutex);
    if (closing_set) {
      flag->store(false, std::memory_order_release);
      auto found = all.sets.find(fd);
      if (found != all.sets.end()) {
        closed = std::move(found->second);
        all.sets.erase(found);
      }
    }
    if (all.watching.load(std::memory_order_relaxed)) {
      sets.reserve(all.sets.size());
      for (const auto& [epoll_fd, set] : all.sets) sets.push_back(set);
    }
  }
  // Outside the registry's lock: a set's lock is taken under no other.
  for (const auto& set : sets) set->fd_closing(fd);
}

std::shared_ptr<EpollSet> active_epoll_set(int fd) {
  if (!registry().watching.load(std::memory_order_relaxed)) return nullptr;
  std::shared_ptr<EpollSet> set = find_set(fd);
  return set != nullptr && set->active() ? set : nullptr;
}

}  // namespace qpsock::readiness
