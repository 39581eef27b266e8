// Whether the kernel lets the peer read our memory with process_vm_readv.
// It needs ptrace access (same user, dumpable, and Yama's ptrace_scope):
// scope 0 allows it, scope 1 only for a descendant or the one process named
// with prctl(PR_SET_PTRACER), scope 2 and 3 never (without CAP_SYS_PTRACE).
//
// Under scope 1 a process can name a single ptracer, so a PtracerGrant names
// the peer and counts the transports relying on it; a second peer process
// cannot be served at the same time (acquire gives -EPERM, and the caller
// declines the upgrade rather than failing later). The probe at setup
// (process_vm_readv of a published word) is what decides in the end.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "transport/shm/process_page.h"

namespace qpsock::transport::shm {

// /proc/sys/kernel/yama/ptrace_scope, or 0 without Yama (read again once a
// second at most).
int yama_ptrace_scope();

class PtracerGrant {
 public:
  PtracerGrant() = default;
  ~PtracerGrant();
  PtracerGrant(PtracerGrant&& other) noexcept;
  PtracerGrant& operator=(PtracerGrant&&) = delete;
  PtracerGrant(const PtracerGrant&) = delete;

  // Lets `peer` read us if Yama's scope 1 requires it (nothing to do for
  // our own pid or another scope); 0 or -EPERM (another peer holds the one
  // grant), or -errno from prctl.
  int acquire(pid_t peer, ProcessPage* page, uint64_t epoch);

 private:
  void release();

  ProcessPage* page_ = nullptr;  // non-null while we hold a share of the grant
  uint64_t epoch_ = 0;
};

}  // namespace qpsock::transport::shm
