#include "stream/control_doorbell.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "common/errno_guard.h"
#include "libc/next_symbols.h"

namespace qpsock::stream {

void ring_doorbell(int tcp_fd) {
  ErrnoGuard errno_guard;
  const char byte = kDoorbellByte;
  next::send(tcp_fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

ControlState take_doorbells(int tcp_fd) {
  ErrnoGuard errno_guard;
  char bytes[64];
  for (;;) {
    const ssize_t got = next::recv(tcp_fd, bytes, sizeof(bytes), MSG_DONTWAIT);
    if (got == 0) return ControlState::end_of_file;
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? ControlState::quiet : ControlState::gone;
    }
    if (!std::all_of(bytes, bytes + got, [](char byte) { return byte == kDoorbellByte; }))
      return ControlState::gone;
  }
}

ControlState read_control_state(int tcp_fd, DoorbellsPossible doorbells) {
  if (doorbells == DoorbellsPossible::yes) return take_doorbells(tcp_fd);
  ErrnoGuard errno_guard;
  char byte;
  for (;;) {
    const ssize_t got = next::recv(tcp_fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
    if (got == 0) return ControlState::end_of_file;
    if (got > 0) return ControlState::quiet;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? ControlState::quiet : ControlState::gone;
  }
}

bool control_reads_end_of_file(int tcp_fd, DoorbellsPossible doorbells) {
  return read_control_state(tcp_fd, doorbells) == ControlState::end_of_file;
}

}  // namespace qpsock::stream
