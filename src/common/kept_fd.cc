#include "common/kept_fd.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>

#include "common/fd_indexed_array.h"

namespace qpsock {
namespace {

// word = closes << 32 | uses
constexpr uint64_t kOneClose = uint64_t{1} << 32;
constexpr uint64_t kUsesMask = kOneClose - 1;

constinit FdIndexedArray<std::atomic<uint64_t>> fence_words;
// Nothing kept yet: close costs this one load.
constinit std::atomic<bool> any_kept{false};
// The highest number ever kept: how far a forked child looks.
constinit std::atomic<int> highest_kept{-1};

// The uses this thread holds, so that a close from its signal handler does
// not wait for them (they end only when the handler returns).
constexpr int kUsesTracked = 4;
struct ThreadUses {
  int fds[kUsesTracked];
  int count;
};
constinit __attribute__((tls_model("initial-exec"))) thread_local ThreadUses this_thread_uses{{}, 0};

uint64_t uses_by_this_thread(int fd) {
  uint64_t uses = 0;
  const int count = this_thread_uses.count < kUsesTracked ? this_thread_uses.count : kUsesTracked;
  for (int index = 0; index < count; ++index)
    if (this_thread_uses.fds[index] == fd) ++uses;
  return uses;
}

// Noted before the use is taken: a signal that comes between the two then
// finds it noted and does not wait for it.
void note_use(int fd) {
  const int index = this_thread_uses.count++;
  if (index < kUsesTracked) this_thread_uses.fds[index] = fd;
}

void drop_use_note() { --this_thread_uses.count; }

}  // namespace

void prepare_kept_fds() { static_cast<void>(fence_words.capacity()); }

KeptFd keep_fd(int fd) {
  std::atomic<uint64_t>* word = fence_words.at(fd);
  if (word == nullptr) return KeptFd{fd, 0};
  if (!any_kept.load(std::memory_order_relaxed)) {
    watch_forks_for_kept_fds();
    any_kept.store(true, std::memory_order_seq_cst);
  }
  int highest = highest_kept.load(std::memory_order_relaxed);
  while (fd > highest && !highest_kept.compare_exchange_weak(highest, fd, std::memory_order_relaxed)) {
  }
  return KeptFd{fd, static_cast<uint32_t>(word->load(std::memory_order_acquire) >> 32)};
}

bool still_kept(KeptFd kept) {
  std::atomic<uint64_t>* word = fence_words.at(kept.fd);
  return word != nullptr && static_cast<uint32_t>(word->load(std::memory_order_acquire) >> 32) == kept.closes;
}

FdUse::FdUse(KeptFd kept) {
  std::atomic<uint64_t>* word = fence_words.at(kept.fd);
  if (word == nullptr) return;
  note_use(kept.fd);
  uint64_t current = word->load(std::memory_order_acquire);
  do {
    if (static_cast<uint32_t>(current >> 32) != kept.closes) {
      drop_use_note();
      return;
    }
  } while (!word->compare_exchange_weak(current, current + 1, std::memory_order_acq_rel,
                                        std::memory_order_acquire));
  fd_ = kept.fd;
}

FdUse::~FdUse() {
  if (fd_ < 0) return;
  fence_words.at(fd_)->fetch_sub(1, std::memory_order_release);
  drop_use_note();
}

void fence_fd_close(int fd) {
  if (!any_kept.load(std::memory_order_seq_cst)) return;
  std::atomic<uint64_t>* word = fence_words.at(fd);
  if (word == nullptr) return;
  uint64_t current = word->fetch_add(kOneClose, std::memory_order_acq_rel) + kOneClose;
  // Uses last one non-blocking call each: yielding lets a preempted holder finish.
  const uint64_t own = uses_by_this_thread(fd);
  while ((current & kUsesMask) > own) {
    sched_yield();
    current = word->load(std::memory_order_acquire);
  }
}

int highest_kept_fd() { return highest_kept.load(std::memory_order_acquire); }

namespace {

void drop_other_threads_uses_in_child() {
  if (!any_kept.load(std::memory_order_acquire)) return;
  const int highest = highest_kept.load(std::memory_order_acquire);
  for (int fd = 0; fd <= highest; ++fd) {
    std::atomic<uint64_t>* word = fence_words.at(fd);
    if (word == nullptr) break;
    const uint64_t current = word->load(std::memory_order_relaxed);
    if ((current & kUsesMask) != 0)
      word->store((current & ~kUsesMask) | uses_by_this_thread(fd), std::memory_order_relaxed);
  }
}

}  // namespace

void watch_forks_for_kept_fds() {
  static std::atomic<bool> registered{false};
  if (registered.exchange(true, std::memory_order_acq_rel)) return;
  pthread_atfork(nullptr, nullptr, drop_other_threads_uses_in_child);
}

}  // namespace qpsock
