#pragma once

#include <fcntl.h>
#include <sys/socket.h>

#include "libc/next_symbols.h"
#include "stream/blocking.h"

namespace qpsock::upgrade {

// Whether calls on the socket block (O_NONBLOCK lives on the open file, so it
// is asked each time: another fd or process may have changed it).
inline bool socket_is_blocking(int fd) {
  const int status = next::fcntl(fd, F_GETFL, 0L);
  return status >= 0 && (status & O_NONBLOCK) == 0;
}

// Whether a call with `flags` on the socket may wait, asked of the kernel only
// if the call comes to need the answer (most calls find data or room at once).
inline stream::Blocking call_blocking(int fd, int flags) {
  if ((flags & MSG_DONTWAIT) != 0) return stream::Blocking(false);
  return stream::Blocking(socket_is_blocking, fd);
}

}  // namespace qpsock::upgrade
