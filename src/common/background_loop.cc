#include "common/background_loop.h"

#include <sys/epoll.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <mutex>

#include "common/errno_guard.h"
#include "common/fork_aware_instance.h"
#include "common/helper_thread.h"
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
  void run();
  void forget_after_fork();

 private:
  int start_locked();
  // The callback's index + 1, added if new; 0 when the table is full.
  uint64_t callback_number_locked(BackgroundCallback callback);

  int epoll_fd_ = -1;
  bool running_ = false;
  int start_error_ = 0;  // no thread: every later watch fails with it
  std::array<BackgroundCallback, kMostCallbacks> callbacks_{};
  size_t callback_count_ = 0;
};

BackgroundLoop& loop() { return fork_aware_instance<BackgroundLoop>(); }

int BackgroundLoop::watch(int fd, uint32_t events, BackgroundCallback callback, uint64_t tag) {
  if (tag > kLargestBackgroundTag || callback == nullptr) return -EINVAL;
  ErrnoGuard errno_guard;
  std::lock_guard lock(mutex_);
  if (int error = start_locked(); error < 0) return error;
  const uint64_t number = callback_number_locked(callback);
  if (number == 0) return -ENOSPC;
  epoll_event event{};
  event.events = events;
  event.data.u64 = number << kTagBits | tag;
  if (next::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) == 0) return 0;
  if (errno == EEXIST && next::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &event) == 0) return 0;
  return -errno;
}

int BackgroundLoop::start_locked() {
  if (running_) return 0;
  if (start_error_ != 0) return start_error_;
  epoll_fd_ = keep_own_descriptor(next::epoll_create1(EPOLL_CLOEXEC));
  int error = epoll_fd_ < 0 ? -errno : 0;
  if (error == 0) error = -start_helper_thread("qpsock-events", [] { loop().run(); });
  if (error == 0) {
    running_ = true;
    return 0;
  }
  if (epoll_fd_ >= 0) next::close(epoll_fd_);
  epoll_fd_ = -1;
  start_error_ = error;
  return error;
}

uint64_t BackgroundLoop::callback_number_locked(BackgroundCallback callback) {
  const auto known = std::find(callbacks_.begin(), callbacks_.begin() + callback_count_, callback);
  if (known != callbacks_.begin() + callback_count_) return known - callbacks_.begin() + 1;
  if (callback_count_ == callbacks_.size()) return 0;
  callbacks_[callback_count_++] = callback;
  return callback_count_;
}

void BackgroundLoop::run() {
  int epoll_fd;
  {
    std::lock_guard lock(mutex_);
    epoll_fd = epoll_fd_;
  }
  std::array<epoll_event, 32> events;
  for (;;) {
    const int count = next::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), -1);
    for (int index = 0; index < count; ++index) {
      const uint64_t data = events[index].data.u64;
      const uint64_t number = data >> kTagBits;
      BackgroundCallback callback = nullptr;
      {
        std::lock_guard lock(mutex_);
        if (number >= 1 && number <= callback_count_) callback = callbacks_[number - 1];
      }
      if (callback != nullptr) callback(data & kLargestBackgroundTag, events[index].events);
    }
  }
}

void BackgroundLoop::forget_after_fork() {
  // The set is shared with the parent, whose thread goes on using it.
  if (epoll_fd_ >= 0) next::close(epoll_fd_);
  epoll_fd_ = -1;
  running_ = false;
}

}  // namespace

int watch_in_background(int fd, uint32_t events, BackgroundCallback callback, uint64_t tag) {
  return loop().watch(fd, events, callback, tag);
}

void prepare_background_loop() { loop(); }

}  // namespace qpsock
