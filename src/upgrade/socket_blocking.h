#pragma once

#include <fcntl.h>

#include "libc/next_symbols.h"

namespace qpsock::upgrade {

// Whether calls on the socket block (O_NONBLOCK lives on the open file, so it
// is asked each time: another fd or process may have changed it).
inline bool socket_is_blocking(int fd) {
  const int status = next::fcntl(fd, F_GETFL, 0L);
  return status >= 0 && (status & O_NONBLOCK) == 0;
}

}  // namespace qpsock::upgrade
