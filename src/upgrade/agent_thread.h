// The helper threads of the upgrade (the agent that answers for clients, the
// worker that tries for servers, the cork flusher) start the same way:
// detached, named, and with every signal blocked, so that they never take the
// application's. Each is one process-wide object that fork must leave
// consistent in the child, which has no such thread.
#pragma once

#include <pthread.h>

#include <mutex>
#include <new>

namespace qpsock::upgrade {

// Starts `run` on a new detached thread called `name` (at most 15
// characters): 0, or the pthread_create error (positive, as pthreads gives it).
int start_agent_thread(const char* name, void (*run)());
// The same for a thread that runs `entry(argument)` (argument's owner is
// the thread once this returns 0).
int start_agent_thread(const char* name, void* (*entry)(void*), void* argument);

// A helper's lock over its state, which fork_aware_instance holds across fork.
class HelperLock {
 public:
  void lock() { mutex_.lock(); }
  void unlock() { mutex_.unlock(); }

 protected:
  std::mutex mutex_;
};

// The one `Helper` (a HelperLock) of the process, made on first use and never destroyed (it
// may be needed while the process exits). Its lock() is held across fork, and
// the child calls forget_after_fork() (its thread did not come along).
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

// How a helper thread sleeps until there is work: an eventfd (unlike a
// condition variable, it survives fork).
class HelperWakeup {
 public:
  // 0, or -errno.
  int open();
  void close();
  // Wakes the sleeper (or its next sleep).
  void signal() const;
  // Sleeps until signalled or `timeout_ms` passed (-1: no limit).
  void sleep(int timeout_ms) const;
  // Readable once signalled, for a sleeper that waits on more (sleep(0) then
  // takes the signal).
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

}  // namespace qpsock::upgrade
