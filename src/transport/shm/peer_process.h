// The peer process: its pid, a pidfd on it (readable once it exited; never
// confused with a later process that reuses the pid), reads of its memory
// with process_vm_readv (the rendezvous's "RDMA READ": one copy, straight
// into the destination), and the doorbells of our link with it
// (link_doorbell.h). Every transport with the same peer process shares one
// PeerProcess (share_peer_process): one pidfd and one doorbell each way per
// peer, not per connection, watched by the background loop
// (common/background_loop.h), which tells each transport of the peer's exit
// and of its wakeups.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/unique_fd.h"
#include "transport/shm/link_doorbell.h"

namespace qpsock::transport::shm {

// Told once that the peer process exited, on the background loop's thread,
// under the PeerProcess's lock (unsubscribe waits for it): it may only set
// flags and wake its sleepers.
class PeerExitListener {
 public:
  virtual void peer_exited() = 0;

 protected:
  ~PeerExitListener() = default;
};

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

  // For a shared PeerProcess: whether its exit was reported (no system call;
  // it lags the exit by the loop's wakeup).
  bool exit_reported() const { return exit_reported_.load(); }
  // `listener` hears of the exit until it unsubscribes: 0, or -ESRCH when
  // the exit was already reported.
  int subscribe(PeerExitListener* listener);
  void unsubscribe(PeerExitListener* listener);
  // Reports the exit to every listener, once.
  void report_exit();

  // Ours, for the peer to ring: opened by share_peer_process.
  OwnDoorbell& own_doorbell() { return own_doorbell_; }
  // The peer's doorbell of link `link_id`: the one kept if the peer's hello
  // names it again (the fds then only close), else one made of these. 0 with
  // `out` set, or -errno (PeerDoorbell::attach).
  int peer_doorbell(uint64_t link_id, UniqueFd doorbell, int page_fd,
                    std::shared_ptr<PeerDoorbell>& out);

 private:
  pid_t pid_ = -1;
  UniqueFd pidfd_;
  std::atomic<bool> exit_reported_{false};
  std::mutex listeners_mutex_;
  std::vector<PeerExitListener*> listeners_;
  OwnDoorbell own_doorbell_;
  std::mutex peer_doorbell_mutex_;
  std::shared_ptr<PeerDoorbell> peer_doorbell_;
};

// The PeerProcess of the live process `pid` that this process already
// shares with, or a new one, its exit watched: 0 with `out` set, or -errno
// (from open(), or from the background loop). A process that exited (its
// pid perhaps reused) is never handed out again. Thread-safe; a forked
// child starts with none.
int share_peer_process(pid_t pid, std::shared_ptr<PeerProcess>& out);

}  // namespace qpsock::transport::shm
