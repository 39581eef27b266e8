#include "transport/shm/peer_process.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "common/errno_guard.h"
#include "common/own_descriptor.h"
#include "libc/next_symbols.h"

namespace qpsock::transport::shm {
namespace {

// Enough for every post (max_slices is capped below it).
constexpr size_t kMostPieces = 64;

}  // namespace

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

}  // namespace qpsock::transport::shm
