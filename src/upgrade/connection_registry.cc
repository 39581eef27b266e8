#include "upgrade/connection_registry.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <mutex>
#include <new>
#include <unordered_map>

namespace qpsock::upgrade {
namespace {

// A map under one mutex: only processes that have offload candidates ever take
// it, and never across a blocking call.
struct Registry {
  std::mutex mutex;
  std::unordered_map<int, std::shared_ptr<Connection>> by_fd;
  std::atomic<size_t> count{0};
};

Registry& registry() {
  // Never destroyed: data calls may come from exit handlers after static destructors.
  alignas(Registry) static unsigned char storage[sizeof(Registry)];
  static Registry* instance = ::new (storage) Registry;
  return *instance;
}

// The registry's lock, with every signal blocked while it is held: a signal
// handler that does socket I/O on this thread must never find it taken.
// (Paid only by processes that have offloadable connections; a lock-free
// table is the planned replacement.)
class RegistryLock {
 public:
  explicit RegistryLock(std::mutex& mutex) : mutex_(mutex) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &previous_);
    mutex_.lock();
  }
  ~RegistryLock() {
    mutex_.unlock();
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  RegistryLock(const RegistryLock&) = delete;
  RegistryLock& operator=(const RegistryLock&) = delete;

 private:
  std::mutex& mutex_;
  sigset_t previous_;
};

}  // namespace

bool any_connections() { return registry().count.load(std::memory_order_relaxed) != 0; }

std::shared_ptr<Connection> find_connection(int fd) {
  Registry& entries = registry();
  if (entries.count.load(std::memory_order_acquire) == 0) return nullptr;
  RegistryLock lock(entries.mutex);
  auto found = entries.by_fd.find(fd);
  return found == entries.by_fd.end() ? nullptr : found->second;
}

void attach_connection(int fd, std::shared_ptr<Connection> connection) {
  Registry& entries = registry();
  RegistryLock lock(entries.mutex);
  entries.by_fd[fd] = std::move(connection);
  entries.count.store(entries.by_fd.size(), std::memory_order_release);
}

std::shared_ptr<Connection> detach_connection(int fd) {
  Registry& entries = registry();
  if (entries.count.load(std::memory_order_acquire) == 0) return nullptr;
  std::shared_ptr<Connection> detached;
  RegistryLock lock(entries.mutex);
  auto found = entries.by_fd.find(fd);
  if (found == entries.by_fd.end()) return nullptr;
  detached = std::move(found->second);
  entries.by_fd.erase(found);
  entries.count.store(entries.by_fd.size(), std::memory_order_release);
  return detached;
}

void copy_connection(int source, int destination) {
  std::shared_ptr<Connection> shared = find_connection(source);
  if (shared == nullptr) {
    detach_connection(destination);
    return;
  }
  attach_connection(destination, std::move(shared));
}

bool visit_connections(void (*visit)(int fd, Connection& connection)) {
  Registry& entries = registry();
  if (entries.count.load(std::memory_order_acquire) == 0) return true;
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  const bool locked = entries.mutex.try_lock();
  if (locked) {
    for (const auto& [fd, connection] : entries.by_fd) visit(fd, *connection);
    entries.mutex.unlock();
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return locked;
}

bool connection_in_use(const Connection* connection) {
  Registry& entries = registry();
  RegistryLock lock(entries.mutex);
  for (const auto& [fd, each] : entries.by_fd)
    if (each.get() == connection) return true;
  return false;
}

}  // namespace qpsock::upgrade
