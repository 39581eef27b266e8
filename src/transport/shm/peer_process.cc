#include "transport/shm/peer_process.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <unordered_map>

#include "common/background_loop.h"
#include "common/errno_guard.h"
#include "common/fork_aware_instance.h"
#include "common/own_descriptor.h"
#include "libc/next_symbols.h"

namespace qpsock::transport::shm {
namespace {

// Enough for every post (max_slices is capped below it).
constexpr size_t kMostPieces = 64;

// A watch's tag: the pid, and the PeerProcess's serial (pids are reused).
constexpr int kPidBits = 22;  // PID_MAX_LIMIT is 2^22
constexpr uint64_t kPidMask = (uint64_t{1} << kPidBits) - 1;

// The peer processes transports of this process share, by pid.
class SharedPeers : public HelperLock {
 public:
  SharedPeers() { prepare_background_loop(); }  // its lock nests in ours

  int share(pid_t pid, std::shared_ptr<PeerProcess>& out) {
    std::shared_ptr<PeerProcess> gone;  // exited, perhaps not yet told by the loop
    int error = 0;
    {
      std::lock_guard lock(*this);
      Entry& known = by_pid_[pid];
      std::shared_ptr<PeerProcess> live = known.peer.lock();
      if (live != nullptr && !live->exited()) {
        out = std::move(live);
        return 0;
      }
      gone = std::move(live);
      error = open_locked(pid, known, out);
      if (error < 0)
        by_pid_.erase(pid);
      else
        forget_gone_peers();
    }
    if (gone != nullptr) gone->report_exit();
    return error;
  }

  // The child's transports inherited from its parent are unusable
  // (shm_transport.h), and so are the parent's ptrace grants.
  void forget_after_fork() {
    by_pid_.clear();
    by_tag_.clear();
  }

 private:
  struct Entry {
    std::weak_ptr<PeerProcess> peer;
    uint64_t serial = 0;
  };

  // A new PeerProcess for `pid`, its exit watched, in `entry` and `out`; 0
  // or -errno.
  int open_locked(pid_t pid, Entry& entry, std::shared_ptr<PeerProcess>& out) {
    auto opened = std::make_shared<PeerProcess>();
    if (int error = opened->open(pid); error < 0) return error;
    const uint64_t serial = ++serials_ & (kLargestBackgroundTag >> kPidBits);
    const uint64_t tag = serial << kPidBits | static_cast<uint64_t>(pid);
    if (int error = watch_in_background(opened->pidfd(), EPOLLIN | EPOLLONESHOT, &on_exit, tag);
        error < 0)
      return error;
    if (int error = opened->own_doorbell().open(&on_doorbell, tag); error < 0) return error;
    entry = {opened, serial};
    by_tag_[tag] = opened;
    out = std::move(opened);
    return 0;
  }

  // The PeerProcess a watch's tag names, while a transport holds it (one
  // whose pid a later process reuses too: its transports still hear of
  // wakeups).
  static std::shared_ptr<PeerProcess> find(uint64_t tag) {
    auto& peers = fork_aware_instance<SharedPeers>();
    std::lock_guard lock(peers);
    const auto found = peers.by_tag_.find(tag);
    return found != peers.by_tag_.end() ? found->second.lock() : nullptr;
  }

  static void on_exit(uint64_t tag, uint32_t /*events*/) {
    if (const auto peer = find(tag); peer != nullptr) peer->report_exit();
  }

  static void on_doorbell(uint64_t tag, uint32_t /*events*/) {
    if (const auto peer = find(tag); peer != nullptr) peer->own_doorbell().dispatch();
  }

  // Entries whose transports are all gone, once the maps have doubled since
  // the last sweep: the work per share stays constant on average.
  void forget_gone_peers() {
    if (by_tag_.size() < swept_size_ * 2) return;
    std::erase_if(by_pid_, [](const auto& entry) { return entry.second.peer.expired(); });
    std::erase_if(by_tag_, [](const auto& entry) { return entry.second.expired(); });
    swept_size_ = std::max<size_t>(by_tag_.size(), 16);
  }

  std::unordered_map<pid_t, Entry> by_pid_;
  std::unordered_map<uint64_t, std::weak_ptr<PeerProcess>> by_tag_;  // every one still held
  size_t swept_size_ = 16;
  uint64_t serials_ = 0;
};

}  // namespace

int share_peer_process(pid_t pid, std::shared_ptr<PeerProcess>& out) {
  return fork_aware_instance<SharedPeers>().share(pid, out);
}

int PeerProcess::open(pid_t pid) {
  const int fd = keep_own_descriptor(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (fd < 0) return -errno;
  pid_ = pid;
  pidfd_.reset(fd);
  // A pidfd is close-on-exec from birth.
  return 0;
}

bool PeerProcess::exited() const {
  ErrnoGuard errno_guard;
  pollfd watched{pidfd_.get(), POLLIN, 0};
  for (;;) {
    const int ready = next::poll(&watched, 1, 0);
    // Readable, or POLLNVAL/POLLERR: either way the peer is gone to us.
    if (ready >= 0) return ready > 0;
    // A signal arriving during the look (a program that signals itself, as
    // PostgreSQL does for its latches) says nothing of the peer; nor does a
    // lack of memory for the look, which the next one repeats.
    if (errno != EINTR) return false;
  }
}

int PeerProcess::read(std::span<const iovec> destination, uint64_t address, size_t length) const {
  if (destination.size() > kMostPieces) return -EINVAL;
  std::array<iovec, kMostPieces> local;
  std::copy(destination.begin(), destination.end(), local.begin());
  size_t first = 0;
  size_t done = 0;
  // A partial read (the kernel stops at a page it cannot reach) is resumed
  // once; no progress at all is an error.
  while (done < length) {
    iovec remote{reinterpret_cast<void*>(address + done), length - done};
    const ssize_t got = ::process_vm_readv(
        pid_, &local[first], static_cast<unsigned long>(destination.size() - first), &remote, 1, 0);
    if (got < 0) return errno == ESRCH ? -ESRCH : -errno;
    if (got == 0) return -EFAULT;
    done += static_cast<size_t>(got);
    // Skip what landed.
    size_t skip = static_cast<size_t>(got);
    while (first < destination.size() && skip >= local[first].iov_len) {
      skip -= local[first].iov_len;
      ++first;
    }
    if (skip > 0) {
      local[first].iov_base = static_cast<char*>(local[first].iov_base) + skip;
      local[first].iov_len -= skip;
    }
  }
  return exited() ? -ESRCH : 0;
}

int PeerProcess::subscribe(PeerExitListener* listener) {
  std::lock_guard lock(listeners_mutex_);
  if (exit_reported_.load()) return -ESRCH;
  listeners_.push_back(listener);
  return 0;
}

void PeerProcess::unsubscribe(PeerExitListener* listener) {
  std::lock_guard lock(listeners_mutex_);
  std::erase(listeners_, listener);
}

int PeerProcess::peer_doorbell(uint64_t link_id, UniqueFd doorbell, int page_fd,
                               std::shared_ptr<PeerDoorbell>& out) {
  std::lock_guard lock(peer_doorbell_mutex_);
  if (peer_doorbell_ == nullptr || peer_doorbell_->link_id() != link_id) {
    auto attached = std::make_shared<PeerDoorbell>();
    if (int error = attached->attach(link_id, std::move(doorbell), page_fd); error < 0) return error;
    peer_doorbell_ = std::move(attached);
  }
  out = peer_doorbell_;
  return 0;
}

void PeerProcess::report_exit() {
  std::lock_guard lock(listeners_mutex_);
  if (exit_reported_.exchange(true)) return;
  for (PeerExitListener* listener : listeners_) listener->peer_exited();
}

}  // namespace qpsock::transport::shm
