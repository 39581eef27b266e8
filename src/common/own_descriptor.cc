// keep_own_descriptor: renumbering qpsock's descriptors above the soft limit.
#include "common/own_descriptor.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "common/errno_guard.h"
#include "common/fd_indexed_array.h"
#include "common/log.h"
#include "libc/next_symbols.h"

namespace qpsock {
namespace {

// Soft limits from which we do not raise: a number above them would grow the
// kernel's descriptor table by megabytes.
constexpr rlim_t kLargestLiftedLimit = 65536;
// How far above the soft limit our numbers may go.
constexpr rlim_t kLiftSpan = 65536;
// Without room above, the smallest limit under which we keep descriptors:
// 4096, the hard limit a JVM raises its soft one to (MaxFDLimit), is shared;
// 1024, the limit small clients run under and reach, is not.
constexpr rlim_t kSmallestSharedLimit = 4096;

// Serializes raising and restoring the limit, so that each raise reads the
// application's own value. Holds the holder's pid: a child forked while
// another thread held it finds its parent's pid there and takes it over.
std::atomic<pid_t> lift_holder{0};

class LiftLock {
 public:
  LiftLock() {
    const pid_t self = ::getpid();
    for (;;) {
      pid_t expected = 0;
      if (lift_holder.compare_exchange_weak(expected, self, std::memory_order_acquire)) return;
      if (expected != 0 && expected != self &&
          lift_holder.compare_exchange_weak(expected, self, std::memory_order_acquire))
        return;
      ::sched_yield();
    }
  }
  ~LiftLock() { lift_holder.store(0, std::memory_order_release); }
  LiftLock(const LiftLock&) = delete;
  LiftLock& operator=(const LiftLock&) = delete;
};

std::atomic<bool> refusal_reported{false};
// CLOCK_MONOTONIC nanoseconds of the last refusal (0: none).
std::atomic<int64_t> last_refusal_ns{0};
constexpr int64_t kRefusalHoldsFor = 1'000'000'000;

int64_t monotonic_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

int refuse(const rlimit& limit, const char* why) {
  note_descriptor_limit();
  if (take_descriptor_limit_warning())
    QPSOCK_LOG(warn,
               "RLIMIT_NOFILE %llu (hard %llu): %s, so connections stay on TCP meanwhile (a hard "
               "limit above the soft one gives qpsock descriptors of its own)",
               static_cast<unsigned long long>(limit.rlim_cur),
               static_cast<unsigned long long>(limit.rlim_max), why);
  return -EMFILE;
}

// Renumbers `fd` to at or above limit.rlim_cur; the new number, or -1 with
// errno set and `fd` still open.
int lift(int fd, const rlimit& limit) {
  const int descriptor_flags = next::fcntl(fd, F_GETFD);
  if (descriptor_flags < 0) return -1;
  const rlim_t raised_to =
      limit.rlim_max - limit.rlim_cur > kLiftSpan ? limit.rlim_cur + kLiftSpan : limit.rlim_max;
  const rlimit raised{raised_to, limit.rlim_max};
  if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) return -1;
  const int moved = next::fcntl(fd, (descriptor_flags & FD_CLOEXEC) != 0 ? F_DUPFD_CLOEXEC : F_DUPFD,
                                static_cast<int>(limit.rlim_cur));
  const int dup_error = errno;
  ::setrlimit(RLIMIT_NOFILE, &limit);
  errno = dup_error;
  return moved;
}

// Each kept descriptor's file, by number (0: none), and the highest number kept.
FdIndexedArray<std::atomic<uint64_t>> own_files;
std::atomic<int> highest_own{-1};

// A file's identity: its device and inode (0 if fstat fails).
uint64_t file_identity(int fd) {
  struct stat status {};
  if (::fstat(fd, &status) != 0) return 0;
  const uint64_t identity = (static_cast<uint64_t>(status.st_dev) << 40) ^ status.st_ino;
  return identity != 0 ? identity : 1;
}

void remember_own(int fd) {
  std::atomic<uint64_t>* slot = own_files.at(fd);
  if (slot == nullptr) return;
  slot->store(file_identity(fd), std::memory_order_release);
  int highest = highest_own.load(std::memory_order_relaxed);
  while (fd > highest && !highest_own.compare_exchange_weak(highest, fd, std::memory_order_relaxed)) {
  }
}

// place_own_descriptor without the remembering; errno is the caller's to keep.
int place_descriptor(int& fd) {
  LiftLock lock;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return refuse(limit, "unreadable");
  if (static_cast<rlim_t>(fd) >= limit.rlim_cur) return 0;
  if (limit.rlim_cur < kLargestLiftedLimit && limit.rlim_max > limit.rlim_cur) {
    const int moved = lift(fd, limit);
    if (moved >= 0) {
      next::close(fd);
      fd = moved;
      return 0;
    }
    if (errno == EMFILE)
      return refuse(limit, "qpsock's descriptors fill the room above the soft limit");
    // setrlimit refused (a sandbox): share the application's range.
  }
  if (limit.rlim_cur < kSmallestSharedLimit)
    return refuse(limit, "no room above the soft limit for qpsock's descriptors");
  if (static_cast<rlim_t>(fd) >= limit.rlim_cur / 2)
    return refuse(limit, "the process holds half of its limit");
  return 0;
}

}  // namespace

void forget_own_descriptor(int fd) {
  if (std::atomic<uint64_t>* slot = own_files.at(fd); slot != nullptr && slot->load(std::memory_order_relaxed) != 0)
    slot->store(0, std::memory_order_release);
}

int close_descriptor(int fd) {
  forget_own_descriptor(fd);
  return next::close(fd);
}

int next_own_descriptor(int from, int last) {
  const ErrnoGuard errno_guard;
  const int highest = highest_own.load(std::memory_order_relaxed);
  const int end = last < highest ? last : highest;
  for (int fd = from < 0 ? 0 : from; fd <= end; ++fd) {
    const std::atomic<uint64_t>* slot = own_files.at(fd);
    if (slot == nullptr) break;
    const uint64_t identity = slot->load(std::memory_order_acquire);
    if (identity != 0 && file_identity(fd) == identity) return fd;
  }
  return -1;
}

bool own_descriptors_recently_refused() {
  const int64_t last = last_refusal_ns.load(std::memory_order_relaxed);
  return last != 0 && monotonic_ns() - last < kRefusalHoldsFor;
}

void note_descriptor_limit() { last_refusal_ns.store(monotonic_ns(), std::memory_order_relaxed); }

bool take_descriptor_limit_warning() { return !refusal_reported.exchange(true, std::memory_order_relaxed); }

int place_own_descriptor(int& fd) {
  const ErrnoGuard errno_guard;
  const int placed = place_descriptor(fd);
  if (placed == 0) remember_own(fd);
  return placed;
}

int keep_own_descriptor(int fd) {
  if (fd < 0) return fd;
  if (place_own_descriptor(fd) == 0) return fd;
  next::close(fd);
  errno = EMFILE;
  return -1;
}

}  // namespace qpsock
