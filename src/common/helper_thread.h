// qpsock's helper threads (the background loop, the upgrade's agent that
// answers for clients, its worker that tries for servers, their attempts) start
// the same way: detached, named, and with every signal blocked, so that they
// never take the application's. Each is one process-wide object that fork
// must leave consistent in the child, which has no such thread
// (common/fork_aware_instance.h).
#pragma once

#include <pthread.h>

#include "common/fork_aware_instance.h"

namespace qpsock {

// Starts `run` on a new detached thread called `name` (at most 15
// characters): 0, or the pthread_create error (positive, as pthreads gives it).
int start_helper_thread(const char* name, void (*run)());
// The same for a thread that runs `entry(argument)` (argument's owner is
// the thread once this returns 0).
int start_helper_thread(const char* name, void* (*entry)(void*), void* argument);

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

}  // namespace qpsock
