// The peer process: its pid, a pidfd on it (readable once it exited; never
// confused with a later process that reuses the pid), and reads of its
// memory with process_vm_readv (the rendezvous's "RDMA READ": one copy,
// straight into the destination).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/unique_fd.h"

namespace qpsock::transport::shm {

class PeerProcess {
 public:
  // Opens a pidfd on `pid`; 0 or -errno (-ESRCH: no such process).
  int open(pid_t pid);
  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_.get(); }

  // Whether the peer has exited (its pidfd is readable). One system call.
  bool exited() const;

  // Copies `length` bytes at the peer's `address` into `destination` (whose
  // lengths add up to `length`). Afterwards checks that the peer is still
  // alive: the pid named the peer for the whole read, not a process that
  // reused it. 0 or -errno (-EPERM: the kernel forbids it, see
  // ptracer_grant.h; -ESRCH: the peer is gone; -EFAULT: a bad address).
  int read(std::span<const iovec> destination, uint64_t address, size_t length) const;

 private:
  pid_t pid_ = -1;
  UniqueFd pidfd_;
};

}  // namespace qpsock::transport::shm
