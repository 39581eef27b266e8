#include "stream/control_doorbell.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "common/errno_guard.h"
#include "libc/next_symbols.h"

namespace qpsock::stream {

void ring_doorbell(KeptFd tcp) {
  ErrnoGuard errno_guard;
  const FdUse use(tcp);
  if (!use) return;
  const char byte = kDoorbellByte;
  next::send(use.fd(), &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

namespace {

ControlState gone_with(int* error, int value) {
  if (error != nullptr) *error = value;
  return ControlState::gone;
}

// An error the kernel reports on a connection it still holds open is an
// ICMP report (host or network unreachable, with IP_RECVERR), read once,
// not the connection's end: TCP goes on retransmitting, and a reset or a
// timeout closes it (TCP_CLOSE) before its error is read. Each read takes
// one report; a few in a row are looked past, then an error is an end (one
// that does not go away, on a socket that is no connection, would loop).
constexpr int kSoftErrorsLookedPast = 8;

bool still_open(int tcp_fd) {
  tcp_info info{};
  socklen_t length = sizeof(info);
  return next::getsockopt(tcp_fd, IPPROTO_TCP, TCP_INFO, &info, &length) == 0 &&
         info.tcpi_state != TCP_CLOSE;
}

}  // namespace

ControlState take_doorbells(KeptFd tcp, int* error) {
  ErrnoGuard errno_guard;
  const FdUse use(tcp);
  if (!use) return ControlState::quiet;
  const int tcp_fd = use.fd();
  char bytes[64];
  for (int soft_errors = 0;;) {
    const ssize_t got = next::recv(tcp_fd, bytes, sizeof(bytes), MSG_DONTWAIT);
    if (got == 0) return ControlState::end_of_file;
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return ControlState::quiet;
      // The report is taken; the doorbells follow.
      if (soft_errors++ < kSoftErrorsLookedPast && still_open(tcp_fd)) continue;
      return gone_with(error, errno);
    }
    if (!std::all_of(bytes, bytes + got, [](char byte) { return byte == kDoorbellByte; }))
      return gone_with(error, ECONNRESET);
  }
}

ControlState read_control_state(KeptFd tcp, DoorbellsPossible doorbells, int* error) {
  if (doorbells == DoorbellsPossible::yes) return take_doorbells(tcp, error);
  ErrnoGuard errno_guard;
  const FdUse use(tcp);
  if (!use) return ControlState::quiet;
  const int tcp_fd = use.fd();
  char byte;
  for (int soft_errors = 0;;) {
    const ssize_t got = next::recv(tcp_fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
    if (got == 0) return ControlState::end_of_file;
    if (got > 0) return ControlState::quiet;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ControlState::quiet;
    if (soft_errors++ < kSoftErrorsLookedPast && still_open(tcp_fd)) continue;
    return gone_with(error, errno);
  }
}

bool control_reads_end_of_file(KeptFd tcp, DoorbellsPossible doorbells) {
  return read_control_state(tcp, doorbells) == ControlState::end_of_file;
}

}  // namespace qpsock::stream
