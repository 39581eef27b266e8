#include "common/background_loop.h"

#include <sys/epoll.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "common/errno_guard.h"
#include "common/fork_aware_instance.h"
#include "common/helper_thread.h"
#include "common/log.h"
#include "common/own_descriptor.h"
#include "libc/next_symbols.h"

namespace qpsock {
namespace {

// Callbacks are few (one per kind of watch): the top byte of an event's
// data is its index here, the rest the tag.
constexpr size_t kMostCallbacks = 255;
constexpr int kTagBits = 56;

class BackgroundLoop : public HelperLock {
 public:
  int watch(int fd, uint32_t events, BackgroundCallback callback, uint64_t tag);
  void unwatch(int fd) {
    ErrnoGuard errno_guard;
    const int epoll_fd = epoll_fd_.load(std::memory_order_acquire);
    if (epoll_fd >= 0) next::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
  }
  // Starts the loop and registers `callback`: its number, or -errno.
  int64_t prepare(BackgroundCallback callback);
  void run();
  void forget_after_fork();
  // The set failed under the thread: no watch is taken again (its number
  // may be another file's by now, and is never touched).
  void stop_after_failure(int error) {
    std::lock_guard lock(mutex_);
    running_.store(false, std::memory_order_release);
    epoll_fd_.store(-1, std::memory_order_release);
    start_error_ = error;
  }

 private:
  int start_locked();
  // The callback's index + 1 if the loop runs and knows it, else 0. No lock.
  uint64_t known_number(BackgroundCallback callback) const;

  // Written under the lock; read without it on the fast path: epoll_fd_
  // before running_ is set, callbacks_[n] before callback_count_ passes n.
  std::atomic<int> epoll_fd_{-1};
  std::atomic<bool> running_{false};
  int start_error_ = 0;  // no thread: every later watch fails with it
  std::array<std::atomic<BackgroundCallback>, kMostCallbacks> callbacks_{};
  std::atomic<size_t> callback_count_{0};
};

BackgroundLoop& loop() { return fork_aware_instance<BackgroundLoop>(); }

constinit __attribute__((tls_model("initial-exec"))) thread_local bool this_thread_runs_loop = false;

int BackgroundLoop::watch(int fd, uint32_t events, BackgroundCallback callback, uint64_t tag) {
  if (tag > kLargestBackgroundTag || callback == nullptr) return -EINVAL;
  ErrnoGuard errno_guard;
  int64_t number = static_cast<int64_t>(known_number(callback));
  if (number == 0) number = prepare(callback);
  if (number < 0) return static_cast<int>(number);
  epoll_event event{};
  event.events = events;
  event.data.u64 = static_cast<uint64_t>(number) << kTagBits | tag;
  const int epoll_fd = epoll_fd_.load(std::memory_order_acquire);
  if (next::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event) == 0) return 0;
  if (errno == EEXIST && next::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &event) == 0) return 0;
  return -errno;
}

int64_t BackgroundLoop::prepare(BackgroundCallback callback) {
  if (callback == nullptr) return -EINVAL;
  std::lock_guard lock(mutex_);
  if (int error = start_locked(); error < 0) return error;
  if (const uint64_t known = known_number(callback); known != 0) return static_cast<int64_t>(known);
  const size_t count = callback_count_.load(std::memory_order_relaxed);
  if (count == callbacks_.size()) return -ENOSPC;
  callbacks_[count].store(callback, std::memory_order_relaxed);
  callback_count_.store(count + 1, std::memory_order_release);
  return static_cast<int64_t>(count + 1);
}

uint64_t BackgroundLoop::known_number(BackgroundCallback callback) const {
  if (!running_.load(std::memory_order_acquire)) return 0;
  const size_t count = callback_count_.load(std::memory_order_acquire);
  for (size_t index = 0; index < count; ++index)
    if (callbacks_[index].load(std::memory_order_relaxed) == callback) return index + 1;
  return 0;
}

int BackgroundLoop::start_locked() {
  if (running_.load(std::memory_order_relaxed)) return 0;
  if (start_error_ != 0) return start_error_;
  const int epoll_fd = keep_own_descriptor(next::epoll_create1(EPOLL_CLOEXEC));
  int error = epoll_fd < 0 ? -errno : 0;
  if (error == 0) {
    epoll_fd_.store(epoll_fd, std::memory_order_relaxed);
    error = -start_helper_thread("qpsock-events", [] { loop().run(); });
  }
  if (error == 0) {
    running_.store(true, std::memory_order_release);
    return 0;
  }
  if (epoll_fd >= 0) close_descriptor(epoll_fd);
  epoll_fd_.store(-1, std::memory_order_relaxed);
  start_error_ = error;
  return error;
}

void BackgroundLoop::run() {
  this_thread_runs_loop = true;
  const int epoll_fd = epoll_fd_.load(std::memory_order_acquire);
  std::array<epoll_event, 32> events;
  for (;;) {
    const int count = next::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), -1);
    if (count < 0 && errno != EINTR) {
      // The set was closed behind our back (a raw close system call): the
      // watches are gone with it. Stop rather than spin; later watches fail.
      QPSOCK_LOG(error, "the background loop's epoll set failed (%s); it stops",
                 strerrordesc_np(errno));
      stop_after_failure(-errno);
      return;
    }
    for (int index = 0; index < count; ++index) {
      const uint64_t data = events[index].data.u64;
      const uint64_t number = data >> kTagBits;
      BackgroundCallback callback = nullptr;
      if (number >= 1 && number <= callback_count_.load(std::memory_order_acquire))
        callback = callbacks_[number - 1].load(std::memory_order_relaxed);
      if (callback != nullptr) callback(data & kLargestBackgroundTag, events[index].events);
    }
  }
}

void BackgroundLoop::forget_after_fork() {
  // The set is shared with the parent, whose thread goes on using it.
  running_.store(false, std::memory_order_relaxed);
  const int epoll_fd = epoll_fd_.exchange(-1, std::memory_order_relaxed);
  if (epoll_fd >= 0) close_descriptor(epoll_fd);
}

}  // namespace

int watch_in_background(int fd, uint32_t events, BackgroundCallback callback, uint64_t tag) {
  return loop().watch(fd, events, callback, tag);
}

void unwatch_in_background(int fd) { loop().unwatch(fd); }

void prepare_background_loop() { loop(); }

bool on_background_thread() { return this_thread_runs_loop; }

int prepare_background_callback(BackgroundCallback callback) {
  ErrnoGuard errno_guard;
  const int64_t number = loop().prepare(callback);
  return number < 0 ? static_cast<int>(number) : 0;
}

}  // namespace qpsock
