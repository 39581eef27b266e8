#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cstdint>

#include "libc/next_symbols.h"
#include "stream/blocking.h"

namespace qpsock::upgrade {

// Whether calls on the socket block (O_NONBLOCK lives on the open file, so it
// is asked each time: another fd or process may have changed it).
inline bool socket_is_blocking(int fd) {
  const int status = next::fcntl(fd, F_GETFL, 0L);
  return status >= 0 && (status & O_NONBLOCK) == 0;
}

// SO_RCVTIMEO / SO_SNDTIMEO as the kernel keeps them, in nanoseconds (0: none).
inline int64_t socket_timeout(int fd, int option) {
  timeval timeout{};
  socklen_t length = sizeof(timeout);
  if (next::getsockopt(fd, SOL_SOCKET, option, &timeout, &length) != 0) return 0;
  return static_cast<int64_t>(timeout.tv_sec) * 1'000'000'000 + timeout.tv_usec * 1'000;
}
inline int64_t receive_timeout(int fd) { return socket_timeout(fd, SO_RCVTIMEO); }
inline int64_t send_timeout(int fd) { return socket_timeout(fd, SO_SNDTIMEO); }

enum class CallDirection : uint8_t { receive, send };

// Whether a call with `flags` on the socket may wait, and how long, asked of
// the kernel only if the call comes to need the answer (most calls find data
// or room at once).
inline stream::Blocking call_blocking(int fd, int flags, CallDirection direction) {
  if ((flags & MSG_DONTWAIT) != 0) return stream::Blocking(false);
  return stream::Blocking(socket_is_blocking, fd,
                          direction == CallDirection::receive ? receive_timeout : send_timeout);
}

}  // namespace qpsock::upgrade
