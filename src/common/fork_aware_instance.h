// A process-wide object whose lock fork must leave consistent: the lock is
// held across fork (pthread_atfork), so the child never inherits it taken by
// a thread that did not come along, and the child then forgets what only
// the parent's threads or peers could use.
#pragma once

#include <pthread.h>

#include <mutex>
#include <new>

namespace qpsock {

// The lock of a fork-aware object's state.
class HelperLock {
 public:
  void lock() { mutex_.lock(); }
  void unlock() { mutex_.unlock(); }

 protected:
  std::mutex mutex_;
};

// The one `Helper` (a HelperLock with forget_after_fork()) of the process,
// made on first use and never destroyed (it may be needed while the process
// exits). Its lock() is held across fork, and the child calls
// forget_after_fork().
template <typename Helper>
Helper& fork_aware_instance() {
  alignas(Helper) static unsigned char storage[sizeof(Helper)];
  static Helper* instance = [] {
    auto* created = ::new (storage) Helper;
    pthread_atfork([] { fork_aware_instance<Helper>().lock(); },
                   [] { fork_aware_instance<Helper>().unlock(); },
                   [] {
                     fork_aware_instance<Helper>().unlock();
                     fork_aware_instance<Helper>().forget_after_fork();
                   });
    return created;
  }();
  return *instance;
}

}  // namespace qpsock
