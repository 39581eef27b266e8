// A private piece of memory per process, wiped to zeros in a forked child
// (MADV_WIPEONFORK, common/wiped_on_fork.h). It answers "is this still the
// process that set the transport up?" with one load, without a getpid()
// system call and without pthread_atfork (a raw clone() or vfork-turned-fork is caught too), and it
// holds the Yama ptracer grant, which a child does not inherit either.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>

namespace qpsock::transport::shm {

struct ProcessPage {
  // Nonzero once a transport was set up in this process; 0 in a fresh child.
  std::atomic<uint64_t> epoch;
  // Guards the two fields below (a spin lock: a child starts with it open).
  std::atomic<uint32_t> grant_lock;
  // The process we let read us under Yama ptrace_scope=1 (PR_SET_PTRACER),
  // and how many live transports rely on it.
  pid_t ptracer;
  uint32_t ptracer_users;
};

// The page, mapped on first use; nullptr if it could not be mapped.
ProcessPage* process_page();
// This process's epoch (made on first use: random, never 0); 0 on failure.
uint64_t current_epoch();
// Whether `epoch` is this process's: false in a forked child.
inline bool in_epoch(const ProcessPage* page, uint64_t epoch) {
  return page->epoch.load(std::memory_order_relaxed) == epoch;
}

}  // namespace qpsock::transport::shm
