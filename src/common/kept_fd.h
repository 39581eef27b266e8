// A descriptor number of the application's that qpsock keeps beyond one
// call, and the fence that keeps qpsock off the number once the application
// has closed it (docs/architecture.md, "Descriptor numbers qpsock keeps").
//
// The application may close any descriptor at any time, and the kernel gives
// the number to its next file at once. So a number is kept as a KeptFd: the
// number and how many times it had been closed when it was taken. Every call
// qpsock makes on a kept number holds an FdUse for the length of that one
// non-blocking call; the application's close, dup2 and dup3 call
// fence_fd_close first, which ends every KeptFd of the number and waits for
// the uses under way. A use therefore runs on the file the number was taken
// from, before the close, or not at all.
//
// Rules for holders:
// - Take a KeptFd only where the number is known to be the file meant: in
//   the application's own call on it, or take it first and then check that
//   the number still refers to it (the registry, the socket's inode).
// - Hold an FdUse only across calls that do not block (MSG_DONTWAIT, poll
//   with a zero timeout, getsockopt, epoll_ctl): the close waits for it.
// - A sleep in poll(2) may name a kept number without a use (it consumes
//   nothing); what it reports is acted on only under a use.
//
// Lock-free: one 64-bit word per number, safe in threads, signal handlers
// and across fork (the child drops the uses of threads it did not inherit).
#pragma once

#include <cstdint>

namespace qpsock {

struct KeptFd {
  int fd = -1;
  uint32_t closes = 0;  // the number's close count when it was taken

  bool empty() const { return fd < 0; }
  bool operator==(const KeptFd&) const = default;
};

// `fd` as it is now (see the rules above). An fd the fence cannot track (one
// beyond RLIMIT_NOFILE's hard limit) gives a KeptFd that no use ever holds.
KeptFd keep_fd(int fd);
// Whether `kept` still names the file it was taken from (no close since).
// A hint only: act on the number under an FdUse.
bool still_kept(KeptFd kept);

// One call's hold on a kept number: true if the number is still the file it
// was taken from, and then it stays so until the hold ends.
class FdUse {
 public:
  explicit FdUse(KeptFd kept);
  ~FdUse();
  FdUse(const FdUse&) = delete;
  FdUse& operator=(const FdUse&) = delete;

  explicit operator bool() const { return fd_ >= 0; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

// The application is about to close `fd` (close, or dup2/dup3 over it):
// every KeptFd of it ends, and the uses under way finish first. Uses held by
// the calling thread itself (a signal handler that closes the socket its
// thread was using) are not waited for. Costs one load when no number was
// ever kept.
void fence_fd_close(int fd);

// Maps the fences now, where allocating is safe: a server that leaves its
// connections to forked children then has its children inherit the mapping
// instead of each making its own (an mmap and a getrlimit per child).
void prepare_kept_fds();

// The highest number ever kept (-1: none): close_range looks no further.
int highest_kept_fd();

// Registers the fork handler that drops, in a forked child, the uses of the
// parent's other threads (they went with them). Idempotent; called at load,
// so that it runs before the program's own child handlers (a handler that
// closes a socket), and at the first keep otherwise. A child made without
// the handlers (_Fork, a raw clone) keeps those uses.
void watch_forks_for_kept_fds();

}  // namespace qpsock
