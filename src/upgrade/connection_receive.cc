// The receiving direction: exactly the peer's TCP bytes, then its token, then
// the stream.
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <cstring>
#include <vector>

#include "common/log.h"
#include "libc/next_symbols.h"
#include "upgrade/connection.h"
#include "upgrade/doorbell_watcher.h"
#include "upgrade/connection_registry.h"
#include "upgrade/socket_blocking.h"

namespace qpsock::upgrade {
namespace {

constexpr size_t kMostPieces = 64;

// The first `limit` bytes of `buffers` as a new iovec list (into `storage`).
std::span<const iovec> truncated(std::span<const iovec> buffers, uint64_t limit,
                                 iovec (&storage)[kMostPieces]) {
  size_t count = 0;
  for (const iovec& piece : buffers) {
    if (limit == 0 || count == kMostPieces) break;
    const size_t length = static_cast<size_t>(std::min<uint64_t>(piece.iov_len, limit));
    storage[count++] = {piece.iov_base, length};
    limit -= length;
  }
  return {storage, count};
}

size_t total_length(std::span<const iovec> buffers) {
  size_t total = 0;
  for (const iovec& piece : buffers) total += piece.iov_len;
  return total;
}

// A blocking reader whose number no longer names its socket (the JVM's close
// idiom: dup2 of a placeholder over it, then a signal to the reader; or a
// close by another thread). A kernel reader holds its file and would wake
// with the old socket's bytes or end, or at the signal; qpsock can no longer
// read that socket, and a sleep until the signal loses any signal that came
// before it (the peer's FIN after the JVM's shutdown wakes the wait first).
// So the call ends at once, as interrupted: the result the idiom's signal
// gives, and one every blocking read may give.
int released_from_replaced_number() { return -EINTR; }

// Waits until TCP is readable (or a while has passed: another thread may have
// taken what woke us). -EINTR on a signal, or once the number no longer is
// this socket (poll(2) looks the number up again at every wakeup, unlike a
// read blocked in the kernel).
//
// A connection whose upgrade was declined while we waited is also gone from
// the registry: the next data call on the fd (another thread's) drops it, as
// it will never switch. The fd is still this socket then, and the caller's
// reads go on as plain TCP reads (the server's RDMA attempt declines in the
// background, seconds after the first I/O, while a reader may well be waiting).
int wait_readable(KeptFd socket, const Connection& connection) {
  pollfd entry{socket.fd, POLLIN, 0};
  if (next::poll(&entry, 1, 50) < 0 && errno == EINTR) return -EINTR;
  if (!still_kept(socket)) return released_from_replaced_number();
  if (find_connection(socket.fd).get() == &connection) return 0;
  if (connection.phase() == UpgradePhase::declined && connection.stream() == nullptr) return 0;
  return released_from_replaced_number();
}

ssize_t failed(ssize_t negative_errno) {
  errno = static_cast<int>(-negative_errno);
  return -1;
}

// One piece (read, recv) as recvfrom: the kernel then copies in no msghdr
// or iovec array.
ssize_t receive_by_kernel(int fd, std::span<const iovec> pieces, int flags) {
  if (pieces.size() == 1)
    return next::recvfrom(fd, pieces[0].iov_base, pieces[0].iov_len, flags, nullptr, nullptr);
  msghdr message{};
  message.msg_iov = const_cast<iovec*>(pieces.data());
  message.msg_iovlen = pieces.size();
  return next::recvmsg(fd, &message, flags);
}

}  // namespace

ssize_t Connection::receive(int fd, std::span<const iovec> buffers, int flags) {
  if (inherited_stream()) return failed(-refuse_inherited_call(fd));
  if ((flags & MSG_TRUNC) != 0) return receive_discarding(fd, total_length(buffers), flags & ~MSG_TRUNC);
  stream::Blocking blocking = call_blocking(fd, flags, CallDirection::receive);
  // Once switched, the stream does MSG_WAITALL itself, with MSG_PEEK too (it
  // waits until the whole amount can be peeked, as tcp_recvmsg does).
  if (receiving_switched()) return receive_from_stream(buffers, flags, blocking);
  // MSG_WAITALL is done here, never by the kernel: it could wait for bytes
  // that will come on the stream instead.
  if ((flags & MSG_WAITALL) == 0 || (flags & MSG_PEEK) != 0 || !blocking())
    return receive_once(keep_fd(fd), buffers, flags & ~MSG_WAITALL, blocking);
  const size_t wanted = total_length(buffers);
  const KeptFd socket = keep_fd(fd);
  std::vector<iovec> rest(buffers.begin(), buffers.end());
  size_t done = 0;
  while (done < wanted) {
    const ssize_t got = receive_once(socket, rest, flags & ~MSG_WAITALL, blocking);
    if (got <= 0) return done > 0 ? static_cast<ssize_t>(done) : got;
    done += static_cast<size_t>(got);
    size_t skip = static_cast<size_t>(got);
    while (!rest.empty() && skip >= rest.front().iov_len) {
      skip -= rest.front().iov_len;
      rest.erase(rest.begin());
    }
    if (!rest.empty()) {
      rest.front().iov_base = static_cast<char*>(rest.front().iov_base) + skip;
      rest.front().iov_len -= skip;
    }
  }
  return static_cast<ssize_t>(done);
}

// MSG_TRUNC on TCP: the bytes are taken (or, with MSG_PEEK, counted) but never
// copied, and the buffer may be null. They go through a scratch buffer here,
// before or after the switch alike (the kernel's discarding would also lose
// the binding token if it came in the same read).
ssize_t Connection::receive_discarding(int fd, size_t length, int flags) {
  constexpr size_t kScratch = 64 << 10;
  size_t scratch_size = std::min(length, kScratch);
  if ((flags & MSG_PEEK) != 0) {
    // A peek counts what is there now, all of it (up to `length`).
    int waiting = 0;
    if (readable_bytes(fd, waiting) == 0 && waiting > 0)
      scratch_size = std::min(length, static_cast<size_t>(waiting));
  }
  std::vector<char> scratch(scratch_size);
  if ((flags & MSG_PEEK) != 0 || length == 0) {
    iovec piece{scratch.data(), scratch.size()};
    return receive(fd, {&piece, 1}, flags);
  }
  const int saved_errno = errno;  // a count leaves errno as it was
  size_t done = 0;
  while (done < length) {
    iovec piece{scratch.data(), std::min(length - done, scratch.size())};
    // After the first piece, only what is already here (unless MSG_WAITALL).
    const int each = done == 0 || (flags & MSG_WAITALL) != 0 ? flags : flags | MSG_DONTWAIT;
    const ssize_t got = receive(fd, {&piece, 1}, each);
    if (got < 0) {
      if (done == 0) return got;
      break;
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
    if (static_cast<size_t>(got) < piece.iov_len && (flags & MSG_WAITALL) == 0) break;
  }
  errno = saved_errno;
  return static_cast<ssize_t>(done);
}

ssize_t Connection::receive_once(KeptFd socket, std::span<const iovec> buffers, int flags,
                                 stream::Blocking& blocking) {
  const bool peeking = (flags & MSG_PEEK) != 0;
  const int fd = socket.fd;
  for (;;) {
    if (receiving_switched()) return receive_from_stream(buffers, flags, blocking);
    std::unique_lock lock(receive_mutex_);
    if (receiving_switched()) continue;
    // Closed by another thread while this one waited: a blocking reader
    // ends as interrupted (released_from_replaced_number); a non-blocking
    // one finds no fd. The use ends before any wait: the application's close
    // waits for it.
    std::optional<FdUse> use;
    use.emplace(socket);
    if (!*use) {
      lock.unlock();
      use.reset();
      return failed(blocking() ? released_from_replaced_number() : -EBADF);
    }
    learn_switch_point_locked();
    if (switch_point_ >= 0 && tcp_received_ == static_cast<uint64_t>(switch_point_)) {
      const int token = take_token_locked(fd);
      if (token < 0) return failed(token);
      if (token > 0) {
        // From now on the TCP socket carries only doorbells, FIN and RST.
        // Watched once our use has ended: the watcher's lock is held across
        // fork, and a use must never wait for a lock.
        use.reset();
        watch_for_doorbells(socket);
        continue;
      }
      lock.unlock();
      use.reset();
      if (!blocking()) return failed(-EAGAIN);
      if (wait_readable(socket, *this) < 0) return failed(-EINTR);
      continue;
    }
    const uint64_t limit = switch_point_ >= 0
                               ? static_cast<uint64_t>(switch_point_) - tcp_received_
                               : UINT64_MAX;
    iovec storage[kMostPieces];
    const std::span<const iovec> pieces = truncated(buffers, limit, storage);
    ssize_t got = receive_by_kernel(fd, pieces, flags | MSG_DONTWAIT);
    if (got < 0) {
      const int error = errno;
      if (error != EAGAIN) {
        application_saw_tcp_error(error);
        return failed(-error);
      }
      lock.unlock();
      use.reset();
      if (!blocking()) return failed(-EAGAIN);
      if (wait_readable(socket, *this) < 0) return failed(-EINTR);
      continue;
    }
    if (got == 0) {
      if (total_length(pieces) == 0 && total_length(buffers) > 0) continue;
      // The control channel may have read the reset first (it clears the
      // socket's error): the application hears it once, as from the kernel.
      if (const int error = take_remembered_tcp_error(); error != 0) return failed(-error);
      return 0;  // the peer's FIN, before any switch: the real end
    }
    // Did these bytes run into the token? Only if the header is here by now.
    if (switch_point_ < 0) learn_switch_point_locked();
    if (switch_point_ >= 0) {
      const uint64_t left = static_cast<uint64_t>(switch_point_) - tcp_received_;
      if (static_cast<uint64_t>(got) > left) {
        if (!peeking) stash_token_bytes_locked(pieces, left, static_cast<size_t>(got) - left);
        got = static_cast<ssize_t>(left);
      }
    }
    if (!peeking) {
      tcp_received_ += static_cast<uint64_t>(got);
      count_received(got, stats::Path::kernel);
      count_offered_tcp_bytes(fd, got);
    }
    if (got > 0) return got;
  }
}

bool Connection::settle_receive_switch(int fd) {
  if (receiving_switched() || inherited_stream()) return false;
  std::unique_lock lock(receive_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || receiving_switched()) return false;
  const KeptFd socket = keep_fd(fd);
  std::optional<FdUse> use;
  use.emplace(socket);
  if (!*use) return false;
  learn_switch_point_locked();
  if (switch_point_ < 0 || tcp_received_ != static_cast<uint64_t>(switch_point_)) return false;
  if (take_token_locked(fd) <= 0) return false;
  // As receive_once does: watched once our use has ended.
  use.reset();
  watch_for_doorbells(socket);
  return true;
}

ssize_t Connection::receive_from_stream(std::span<const iovec> buffers, int flags,
                                        stream::Blocking& blocking) {
  const ssize_t got = stream()->receive(buffers, flags, blocking);
  if (got < 0) {
    // The stream's report of the peer's reset is the one the application gets.
    application_saw_tcp_error(static_cast<int>(-got));
    return failed(got);
  }
  if ((flags & MSG_PEEK) == 0) {
    count_received(got, offloaded_path_);
    count_zero_copy(stats::Direction::received, stream()->rendezvous_bytes_received());
  }
  return got;
}

void Connection::learn_switch_point_locked() {
  if (switch_point_ >= 0) return;
  stream::Stream* current = stream();
  if (current == nullptr || stream_given_up_.load(std::memory_order_acquire)) return;
  // The Hello comes first on the peer's direction (verbs path only).
  if (peer_hello_awaited_.load(std::memory_order_acquire) && !take_peer_hello_locked(*current))
    return;
  if (current->readable_bytes() < sizeof(SwitchHeader)) return;
  SwitchHeader header{};
  iovec piece{&header, sizeof(header)};
  const ssize_t got = current->receive({&piece, 1}, MSG_DONTWAIT, false);
  if (got != static_cast<ssize_t>(sizeof(header)) || header.magic != kSwitchMagic ||
      header.tcp_bytes < tcp_received_) {
    QPSOCK_LOG(error, "upgraded stream: a malformed switch header; resetting the connection");
    current->abort();
    return;
  }
  switch_point_ = static_cast<int64_t>(header.tcp_bytes);
}

void Connection::stash_token_bytes_locked(std::span<const iovec> buffers, size_t from,
                                          size_t count) {
  for (const iovec& piece : buffers) {
    if (count == 0) break;
    if (from >= piece.iov_len) {
      from -= piece.iov_len;
      continue;
    }
    const size_t take = std::min(piece.iov_len - from, count);
    const size_t room = token_received_.size() - token_bytes_;
    memcpy(token_received_.data() + token_bytes_, static_cast<char*>(piece.iov_base) + from,
           std::min(take, room));
    token_bytes_ += std::min(take, room);
    count -= take;
    from = 0;
  }
}

int Connection::take_token_locked(int fd) {
  while (token_bytes_ < token_received_.size()) {
    const ssize_t got = next::recv(fd, token_received_.data() + token_bytes_,
                                   token_received_.size() - token_bytes_, MSG_DONTWAIT);
    if (got > 0) {
      token_bytes_ += static_cast<size_t>(got);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == EAGAIN) return 0;
    // The peer vanished between its header and its token.
    stream()->abort();
    return got == 0 ? -ECONNRESET : -errno;
  }
  if (token_received_ != expected_token_) {
    QPSOCK_LOG(error, "fd %d: the binding token in TCP does not match the side channel's; "
               "resetting the connection", fd);
    stream()->abort();
    return -ECONNRESET;
  }
  receive_switched_.store(true, std::memory_order_release);
  stream()->allow_credit_doorbells();
  QPSOCK_LOG(debug, "fd %d: receiving switched to the stream after %llu TCP bytes", fd,
             static_cast<unsigned long long>(tcp_received_));
  return 1;
}

}  // namespace qpsock::upgrade
