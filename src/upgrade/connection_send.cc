// The sending direction: TCP until the switch, then the stream.
#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "common/log.h"
#include "libc/next_symbols.h"
#include "upgrade/connection.h"
#include "upgrade/connection_timers.h"
#include "upgrade/socket_blocking.h"

namespace qpsock::upgrade {
namespace {

// Room for the 16-byte token without waiting: the kernel takes a write while
// its queue is below SO_SNDBUF, and we ask for a comfortable margin.
bool tcp_has_room(int fd) {
  int queued = 0, limit = 0;
  socklen_t length = sizeof(limit);
  if (next::ioctl(fd, SIOCOUTQ, &queued) != 0 ||
      next::getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &limit, &length) != 0)
    return false;
  return queued + 4096 < limit;
}

// Writes the token; waits (briefly: there is room) if the kernel takes part
// of it. Each write is made under an FdUse (the wait may outlast the number).
int write_token(KeptFd socket, const BindingToken& token) {
  const int fd = socket.fd;
  size_t written = 0;
  while (written < token.size()) {
    ssize_t sent;
    {
      const FdUse use(socket);
      if (!use) return -EBADF;  // closed meanwhile
      sent = next::send(fd, token.data() + written, token.size() - written,
                        MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (sent > 0) {
      written += static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && errno != EAGAIN) return -errno;
    pollfd entry{fd, POLLOUT, 0};
    next::poll(&entry, 1, 100);
  }
  return 0;
}

// Over RDMA the stream's write is only posted when send() returns, and the
// token written into TCP next could overtake it: the receiver would then
// read token bytes before it knew the switch point. The header's write is
// complete (acknowledged by the peer, whose completion queue then holds its
// notification) once nothing sent is outstanding. False if that took
// longer than any live queue pair takes.
bool wait_until_delivered(stream::Stream& stream) {
  constexpr auto kLongest = std::chrono::seconds(10);
  const auto give_up = std::chrono::steady_clock::now() + kLongest;
  for (unsigned round = 0; stream.unsent_bytes() != 0; ++round) {
    if (stream.broken() || std::chrono::steady_clock::now() > give_up) return false;
    // A round trip on the fabric: spin a little, then yield the core.
    if (round > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  // A failed write leaves nothing outstanding either: the header may not
  // have landed, and the peer would then never trim the token.
  return !stream.broken();
}

void raise_sigpipe() {
  // As the kernel does: to the calling thread.
  syscall(SYS_tgkill, getpid(), static_cast<pid_t>(syscall(SYS_gettid)), SIGPIPE);
}

}  // namespace

ssize_t Connection::send(int fd, std::span<const iovec> data, int flags) {
  if (inherited_stream()) {
    errno = refuse_inherited_call(fd);
    return -1;
  }
  prepare_to_send(fd);
  if (sending_switched()) return send_over_stream(data, flags, call_blocking(fd, flags, CallDirection::send));
  return send_over_tcp(fd, data, flags);
}

void Connection::prepare_to_send(int fd) {
  if (sending_switched()) return;
  if (peer_hello_awaited_.load(std::memory_order_acquire) && stream() != nullptr)
    look_for_peer_hello();
  if (send_switch_allowed_.load(std::memory_order_acquire)) try_switch_sending(fd);
}

std::optional<ssize_t> Connection::send_by_kernel(int fd, stream::FunctionRef<ssize_t()> kernel_send) {
  if (inherited_stream()) {
    errno = refuse_inherited_call(fd);
    return -1;
  }
  prepare_to_send(fd);
  if (sending_switched()) return std::nullopt;
  const std::optional<ssize_t> sent = send_through_gate(kernel_send);
  if (sent) count_offered_tcp_bytes(fd, *sent);
  return sent;
}

ssize_t Connection::send_over_tcp(int fd, std::span<const iovec> data, int flags) {
  // One piece (write, send) as sendto: the kernel then copies in no msghdr
  // or iovec array.
  const auto kernel_send = [&]() -> ssize_t {
    if (data.size() == 1) return next::sendto(fd, data[0].iov_base, data[0].iov_len, flags, nullptr, 0);
    msghdr message{};
    message.msg_iov = const_cast<iovec*>(data.data());
    message.msg_iovlen = data.size();
    return next::sendmsg(fd, &message, flags);
  };
  if (const auto sent = send_through_gate(kernel_send)) {
    count_offered_tcp_bytes(fd, *sent);
    return *sent;
  }
  return send_over_stream(data, flags, call_blocking(fd, flags, CallDirection::send));
}

std::optional<ssize_t> Connection::send_through_gate(stream::FunctionRef<ssize_t()> kernel_send) {
  uint32_t gate = send_gate_.load(std::memory_order_acquire);
  for (;;) {
    if ((gate & kGateClosed) != 0) {
      // A switch is under way (it takes microseconds): its result decides.
      while (!sending_switched() && (send_gate_.load() & kGateClosed) != 0)
        std::this_thread::yield();
      if (sending_switched()) return std::nullopt;
      gate = send_gate_.load(std::memory_order_acquire);
      continue;
    }
    if (send_gate_.compare_exchange_weak(gate, gate + 1, std::memory_order_acq_rel)) break;
  }
  // The control channel took the socket's reset: this call reports it, as
  // the kernel's would have (ECONNRESET, not EPIPE and SIGPIPE).
  if (const int error = take_remembered_tcp_error(); error != 0) {
    send_gate_.fetch_sub(1, std::memory_order_acq_rel);
    errno = error;
    return -1;
  }
  const ssize_t sent = kernel_send();
  const int saved_errno = errno;
  if (sent < 0) application_saw_tcp_error(saved_errno);
  if (sent > 0) tcp_sent_.fetch_add(static_cast<uint64_t>(sent), std::memory_order_relaxed);
  count_sent(sent, stats::Path::kernel);
  send_gate_.fetch_sub(1, std::memory_order_acq_rel);
  errno = saved_errno;
  return sent;
}

void Connection::try_switch_sending(int fd) {
  // The application's call on fd: the number is its socket now. The delivery
  // wait below may outlast that, so the calls after it are made under a use.
  const KeptFd socket = keep_fd(fd);
  uint32_t open = 0;
  // Only with no TCP write in flight, so tcp_sent_ is exact.
  if (!send_gate_.compare_exchange_strong(open, kGateClosed, std::memory_order_acq_rel)) return;
  if (!tcp_has_room(fd)) {
    send_gate_.store(0, std::memory_order_release);  // try again at a later write
    return;
  }
  const SwitchHeader header{kSwitchMagic, tcp_sent_.load(std::memory_order_relaxed)};
  iovec piece{const_cast<SwitchHeader*>(&header), sizeof(header)};
  const ssize_t sent = stream()->send({&piece, 1}, 0, true);
  if (sent != static_cast<ssize_t>(sizeof(header))) {
    // The peer never learns of a switch: the connection simply stays on TCP.
    QPSOCK_LOG(warn, "fd %d: the upgraded stream failed before the switch (%zd); staying on TCP",
               fd, sent);
    send_switch_allowed_.store(false, std::memory_order_release);
    if (!receiving_switched()) give_up_unswitched_stream("the stream failed before the switch");
    send_gate_.store(0, std::memory_order_release);
    return;
  }
  if (offloaded_path_ == stats::Path::rdma && !wait_until_delivered(*stream())) {
    // The peer may know the switch point and wait for a token we cannot
    // place safely: fail the connection rather than risk its bytes.
    QPSOCK_LOG(error, "fd %d: the RDMA stream did not deliver the switch; resetting the connection",
               fd);
    stream()->abort();
    if (const FdUse use(socket); use) {
      sockaddr unspecified{};
      unspecified.sa_family = AF_UNSPEC;
      next::connect(fd, &unspecified, sizeof(unspecified));
    }
    send_switched_.store(true, std::memory_order_release);
    return;
  }
  if (int error = write_token(socket, peer_token_); error < 0) {
    // TCP itself failed: the stream cannot be trusted either.
    QPSOCK_LOG(debug, "fd %d: writing the binding token: %d", fd, error);
    stream()->abort();
  }
  send_switched_.store(true, std::memory_order_release);
  stream()->allow_doorbells();
  QPSOCK_LOG(debug, "fd %d: sending switched to the stream after %llu TCP bytes", fd,
             static_cast<unsigned long long>(header.tcp_bytes));
}

ssize_t Connection::send_over_stream(std::span<const iovec> data, int flags,
                                     stream::Blocking blocking) {
  const ssize_t sent = stream()->send(data, flags & ~MSG_NOSIGNAL, blocking);
  if (sent >= 0) {
    count_sent(sent, offloaded_path_);
    count_zero_copy(stats::Direction::sent, stream()->rendezvous_bytes_sent());
    if ((flags & MSG_MORE) != 0 && sent > 0 && stream()->holds_corked_bytes() &&
        !cork_flush_scheduled_.exchange(true, std::memory_order_acq_rel))
      run_later(ConnectionTimer::flush_cork, weak_from_this(), kCorkLimit);
    return sent;
  }
  if (sent == -EPIPE && (flags & MSG_NOSIGNAL) == 0) raise_sigpipe();
  // The stream's report of the peer's reset is the one the application gets.
  application_saw_tcp_error(static_cast<int>(-sent));
  errno = static_cast<int>(-sent);
  return -1;
}

void Connection::flush_cork() {
  // Cleared first: a MSG_MORE send from now on schedules its own flush.
  cork_flush_scheduled_.store(false, std::memory_order_release);
  stream::Stream* current = stream();
  if (current != nullptr && current->announce_corked_bytes() &&
      !cork_flush_scheduled_.exchange(true, std::memory_order_acq_rel))
    run_later(ConnectionTimer::flush_cork, weak_from_this(), kCorkLimit);
}

void Connection::schedule_room_request(std::chrono::steady_clock::duration patience) {
  if (!room_ask_scheduled_.exchange(true, std::memory_order_acq_rel))
    run_later(ConnectionTimer::ask_for_room, weak_from_this(), patience);
}

void Connection::ask_for_room() {
  // Cleared first: a stall from now on schedules its own request.
  room_ask_scheduled_.store(false, std::memory_order_release);
  stream::Stream* current = stream();
  if (current == nullptr) return;
  if (const auto again = current->ask_peer_for_room()) schedule_room_request(*again);
}

}  // namespace qpsock::upgrade
