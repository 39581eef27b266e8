// The peer process and our link with it: its pid, a pidfd on it (readable
// once it exited; never confused with a later process that reuses the pid),
// reads of its memory with process_vm_readv (the rendezvous's "RDMA READ":
// one copy, straight into the destination), the doorbells of the link
// (link_doorbell.h) and its pools (link_pool.h: every channel's arena, the
// link's mailbox and offers). Every transport with the same peer process
// shares one PeerProcess (share_peer_process): one pidfd, one doorbell and
// one pool each way per peer, not per connection, watched by the background
// loop (common/background_loop.h), which tells each transport of the peer's
// exit and of its wakeups, and takes the link's messages (link_channels.h).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/unique_fd.h"
#include "stream/function_ref.h"
#include "transport/shm/link_doorbell.h"
#include "transport/shm/link_pool.h"

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

class PeerProcess : public std::enable_shared_from_this<PeerProcess> {
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

  // Ours, for the peer to ring, and our pool: made by share_peer_process.
  OwnDoorbell& own_doorbell() { return own_doorbell_; }
  const std::shared_ptr<OwnPool>& own_pool() const { return own_pool_; }

  // The peer's side of the link, as its hellos gave it (all null before).
  struct PeerLink {
    uint64_t link_id = 0;
    std::shared_ptr<PeerDoorbell> doorbell;
    std::shared_ptr<PeerPool> pool;
  };
  PeerLink peer_link();
  // The peer's pool of link `link_id` if it is the link known already, else null.
  std::shared_ptr<PeerPool> known_peer_pool(uint64_t link_id);
  // A hello proved the peer's names link `link_id`: the link known is kept
  // if it is that one (the fds then only close), else the link becomes the
  // one made of these (`pool` attached already). 0 with `out` set, or
  // -errno (PeerDoorbell::attach).
  int adopt_peer_link(uint64_t link_id, UniqueFd doorbell, int page_fd,
                      std::shared_ptr<PeerPool> pool, PeerLink& out);

  // On the loop's thread, when our doorbell rang: its marked channels told,
  // then the messages in our mailbox handed to link_channels.h.
  void answer_doorbell(const std::shared_ptr<PeerProcess>& self);

  // For share_peer_process and the links' visit.
  int open_own_pool();
  uint64_t known_peer_pool_id();
  uint64_t tag() const { return tag_; }
  void set_tag(uint64_t tag) { tag_ = tag; }

 private:
  uint64_t tag_ = 0;  // its watches' (peer_process.cc)
  pid_t pid_ = -1;
  UniqueFd pidfd_;
  std::atomic<bool> exit_reported_{false};
  std::mutex listeners_mutex_;
  std::vector<PeerExitListener*> listeners_;
  OwnDoorbell own_doorbell_;
  std::shared_ptr<OwnPool> own_pool_;
  std::mutex peer_link_mutex_;
  PeerLink peer_link_;
};

// The PeerProcess of the live process `pid` that this process already
// shares with, or a new one, its exit watched: 0 with `out` set, or -errno
// (from open(), or from the background loop). A process that exited (its
// pid perhaps reused) is never handed out again. Thread-safe; a forked
// child starts with none.
int share_peer_process(pid_t pid, std::shared_ptr<PeerProcess>& out);

// Calls `visit` with each live link whose peer's pool is known, until it
// returns false. Under the links' lock: `visit` may not share, visit or wait.
void visit_links(stream::FunctionRef<bool(const std::shared_ptr<PeerProcess>&)> visit);

// How long a link is kept once it carries no channel (its peer's exit ends
// it at once); links are looked at, and their pools trimmed, once a second
// on the background loop. Set by the upgrade layer from link_idle_time.
void set_link_idle_time(std::chrono::milliseconds idle);

}  // namespace qpsock::transport::shm
