#include "transport/shm/ptracer_grant.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>
#include <utility>

#include "common/own_descriptor.h"
#include "libc/next_symbols.h"

namespace qpsock::transport::shm {
namespace {

class GrantLock {
 public:
  explicit GrantLock(ProcessPage& page) : page_(page) {
    while (page_.grant_lock.exchange(1, std::memory_order_acquire) != 0) std::this_thread::yield();
  }
  ~GrantLock() { page_.grant_lock.store(0, std::memory_order_release); }
  GrantLock(const GrantLock&) = delete;
  GrantLock& operator=(const GrantLock&) = delete;

 private:
  ProcessPage& page_;
};

int read_yama_ptrace_scope() {
  const int fd = next::open("/proc/sys/kernel/yama/ptrace_scope", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[8] = {};
  const ssize_t got = next::read(fd, text, sizeof(text) - 1);
  close_descriptor(fd);
  return got > 0 && text[0] >= '0' && text[0] <= '9' ? text[0] - '0' : 0;
}

// The sysctl read once a second at most: every channel's setup asks, and
// an administrator's change is seen within the second.
constexpr auto kYamaRereadInterval = std::chrono::seconds{1};

}  // namespace

int yama_ptrace_scope() {
  static std::atomic<int> scope{0};
  static std::atomic<std::chrono::steady_clock::rep> read_at{0};
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  const auto last = read_at.load(std::memory_order_acquire);
  if (last != 0 && now - last < std::chrono::steady_clock::duration(kYamaRereadInterval).count())
    return scope.load(std::memory_order_relaxed);
  const int read = read_yama_ptrace_scope();
  scope.store(read, std::memory_order_relaxed);
  read_at.store(now, std::memory_order_release);
  return read;
}

PtracerGrant::~PtracerGrant() { release(); }

PtracerGrant::PtracerGrant(PtracerGrant&& other) noexcept
    : page_(std::exchange(other.page_, nullptr)), epoch_(other.epoch_) {}

int PtracerGrant::acquire(pid_t peer, ProcessPage* page, uint64_t epoch) {
  release();
  if (peer == ::getpid() || yama_ptrace_scope() != 1) return 0;
  GrantLock lock(*page);
  if (page->ptracer_users > 0 && page->ptracer != peer) return -EPERM;
  if (page->ptracer_users == 0 &&
      ::prctl(PR_SET_PTRACER, static_cast<unsigned long>(peer), 0, 0, 0) != 0)
    return -errno;
  page->ptracer = peer;
  ++page->ptracer_users;
  page_ = page;
  epoch_ = epoch;
  return 0;
}

void PtracerGrant::release() {
  ProcessPage* page = std::exchange(page_, nullptr);
  // A forked child holds no grant (Yama does not copy it, and the page was wiped).
  if (page == nullptr || !in_epoch(page, epoch_)) return;
  GrantLock lock(*page);
  if (page->ptracer_users > 0 && --page->ptracer_users == 0) {
    ::prctl(PR_SET_PTRACER, 0UL, 0, 0, 0);
    page->ptracer = 0;
  }
}

}  // namespace qpsock::transport::shm
