#include "transport/shm/peer_process.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
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
#include "transport/shm/link_channels.h"
#include "transport/shm/link_mailbox.h"

namespace qpsock::transport::shm {
namespace {

// Enough for every post (max_slices is capped below it).
constexpr size_t kMostPieces = 64;

// A watch's tag: the pid, and the PeerProcess's serial (pids are reused).
constexpr int kPidBits = 22;  // PID_MAX_LIMIT is 2^22
constexpr uint64_t kPidMask = (uint64_t{1} << kPidBits) - 1;

std::atomic<int64_t> link_idle_ms{10'000};

// How often the links are looked at (kept ones idle out, pools trimmed).
constexpr std::chrono::seconds kLinkSweepInterval{1};

// The peer processes transports of this process share, by pid.
class SharedPeers : public HelperLock {
 public:
  SharedPeers() { prepare_background_loop(); }  // its lock nests in ours

  // A link came up: kept while it carries channels and link_idle_time after.
  void keep(std::shared_ptr<PeerProcess> link) {
    std::lock_guard lock(*this);
    if (!start_sweep_locked()) return;
    const uint64_t tag = link->tag();
    kept_[tag] = {std::move(link), {}};
  }

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
  // (shm_transport.h), and so are the parent's ptrace grants. The loop's
  // own set forgot the parent's watches already (it was made first).
  void forget_after_fork() {
    by_pid_.clear();
    by_tag_.clear();
    kept_.clear();
    if (sweep_fd_ >= 0) close_descriptor(sweep_fd_);
    sweep_fd_ = -1;
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
    if (int error = opened->open_own_pool(); error < 0) return error;
    opened->set_tag(tag);
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
    fork_aware_instance<SharedPeers>().let_go(tag);
  }

  static void on_sweep(uint64_t /*tag*/, uint32_t /*events*/) { fork_aware_instance<SharedPeers>().sweep(); }

  // The kept link of `tag` is not kept any more (its peer exited).
  void let_go(uint64_t tag) {
    std::shared_ptr<PeerProcess> dropped;  // released after our lock: it unwatches, unmaps, closes
    std::lock_guard lock(*this);
    const auto found = kept_.find(tag);
    if (found == kept_.end()) return;
    dropped = std::move(found->second.link);
    kept_.erase(found);
  }

  // Once a second while links are kept: those idle for link_idle_time (or
  // whose peer exited) go, the others' pools are trimmed.
  void sweep() {
    uint64_t expirations;
    [[maybe_unused]] ssize_t drained = next::read(sweep_fd_, &expirations, sizeof(expirations));
    std::vector<std::shared_ptr<PeerProcess>> dropped, trimmed;
    const auto now = std::chrono::steady_clock::now();
    const std::chrono::milliseconds idle{link_idle_ms.load(std::memory_order_relaxed)};
    {
      std::lock_guard lock(*this);
      for (auto each = kept_.begin(); each != kept_.end();) {
        Kept& kept = each->second;
        // Only we hold it: no channel, no setup under way.
        const bool unused = kept.link.use_count() == 1;
        const bool idled_out = unused && (idle.count() == 0 || (kept.idle_since != Clock::time_point{} &&
                                                                 now - kept.idle_since >= idle));
        if (kept.link->exit_reported() || idled_out) {
          dropped.push_back(std::move(kept.link));
          each = kept_.erase(each);
          continue;
        }
        if (!unused)
          kept.idle_since = {};
        else if (kept.idle_since == Clock::time_point{})
          kept.idle_since = now;
        trimmed.push_back(kept.link);
        ++each;
      }
      if (kept_.empty()) arm_sweep_locked(false);
    }
    for (const auto& link : trimmed) link->own_pool()->trim();
  }

  static void on_doorbell(uint64_t tag, uint32_t /*events*/) {
    if (const auto peer = find(tag); peer != nullptr) peer->answer_doorbell(peer);
  }

 public:
  void visit(stream::FunctionRef<bool(const std::shared_ptr<PeerProcess>&)> each) {
    std::lock_guard lock(*this);
    for (const auto& [tag, weak] : by_tag_) {
      const std::shared_ptr<PeerProcess> peer = weak.lock();
      if (peer == nullptr || peer->exit_reported() || peer->known_peer_pool_id() == 0) continue;
      if (!each(peer)) return;
    }
  }

 private:

  // Entries whose transports are all gone, once the maps have doubled since
  // the last sweep: the work per share stays constant on average.
  void forget_gone_peers() {
    if (by_tag_.size() < swept_size_ * 2) return;
    std::erase_if(by_pid_, [](const auto& entry) { return entry.second.peer.expired(); });
    std::erase_if(by_tag_, [](const auto& entry) { return entry.second.expired(); });
    swept_size_ = std::max<size_t>(by_tag_.size(), 16);
  }

  using Clock = std::chrono::steady_clock;
  struct Kept {
    std::shared_ptr<PeerProcess> link;
    Clock::time_point idle_since;  // epoch: in use at the last sweep
  };

  // The sweep's timerfd, made and watched at the first link kept; 0 or -errno.
  bool start_sweep_locked() {
    if (sweep_fd_ < 0) {
      if (sweep_failed_) return false;
      sweep_fd_ = keep_own_descriptor(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
      if (sweep_fd_ < 0 || watch_in_background(sweep_fd_, EPOLLIN | EPOLLET, &on_sweep, 0) < 0) {
        // Links then live only as long as their channels.
        if (sweep_fd_ >= 0) close_descriptor(sweep_fd_);
        sweep_fd_ = -1;
        sweep_failed_ = true;
        return false;
      }
    }
    if (kept_.empty()) arm_sweep_locked(true);
    return true;
  }

  void arm_sweep_locked(bool armed) {
    itimerspec when{};
    if (armed) when.it_value.tv_sec = when.it_interval.tv_sec = kLinkSweepInterval.count();
    timerfd_settime(sweep_fd_, 0, &when, nullptr);
  }

  std::unordered_map<pid_t, Entry> by_pid_;
  std::unordered_map<uint64_t, std::weak_ptr<PeerProcess>> by_tag_;  // every one still held
  std::unordered_map<uint64_t, Kept> kept_;                           // by tag
  int sweep_fd_ = -1;
  bool sweep_failed_ = false;
  size_t swept_size_ = 16;
  uint64_t serials_ = 0;
};

}  // namespace

int share_peer_process(pid_t pid, std::shared_ptr<PeerProcess>& out) {
  return fork_aware_instance<SharedPeers>().share(pid, out);
}

void visit_links(stream::FunctionRef<bool(const std::shared_ptr<PeerProcess>&)> visit) {
  fork_aware_instance<SharedPeers>().visit(visit);
}

void set_link_idle_time(std::chrono::milliseconds idle) {
  link_idle_ms.store(idle.count(), std::memory_order_relaxed);
}

int PeerProcess::open_own_pool() {
  auto pool = std::make_shared<OwnPool>();
  if (int error = pool->create(); error < 0) return error;
  own_pool_ = std::move(pool);
  return 0;
}

void PeerProcess::answer_doorbell(const std::shared_ptr<PeerProcess>& self) {
  own_doorbell_.dispatch();
  take_link_messages(*own_pool_, [&self](const LinkMessage& message) { on_link_message(self, message); });
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

PeerProcess::PeerLink PeerProcess::peer_link() {
  std::lock_guard lock(peer_link_mutex_);
  return peer_link_;
}

uint64_t PeerProcess::known_peer_pool_id() {
  std::lock_guard lock(peer_link_mutex_);
  return peer_link_.pool != nullptr ? peer_link_.link_id : 0;
}

std::shared_ptr<PeerPool> PeerProcess::known_peer_pool(uint64_t link_id) {
  std::lock_guard lock(peer_link_mutex_);
  return peer_link_.link_id == link_id ? peer_link_.pool : nullptr;
}

int PeerProcess::adopt_peer_link(uint64_t link_id, UniqueFd doorbell, int page_fd,
                                 std::shared_ptr<PeerPool> pool, PeerLink& out) {
  bool adopted = false;
  {
    std::lock_guard lock(peer_link_mutex_);
    const bool known = peer_link_.link_id == link_id && peer_link_.doorbell != nullptr &&
                       peer_link_.pool != nullptr;
    if (!known) {
      // Another hello replaced the link since the caller looked.
      if (pool == nullptr) return -EPROTO;
      auto attached = std::make_shared<PeerDoorbell>();
      if (int error = attached->attach(link_id, std::move(doorbell), page_fd); error < 0) return error;
      peer_link_ = {link_id, std::move(attached), std::move(pool)};
      adopted = true;
    }
    out = peer_link_;
  }
  if (adopted) {
    fork_aware_instance<SharedPeers>().keep(shared_from_this());
    link_adopted();
  }
  return 0;
}

void PeerProcess::report_exit() {
  std::lock_guard lock(listeners_mutex_);
  if (exit_reported_.exchange(true)) return;
  for (PeerExitListener* listener : listeners_) listener->peer_exited();
}

}  // namespace qpsock::transport::shm
