// read_small_file: open, read until full or the end, close.
#include "common/small_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "common/errno_guard.h"
#include "common/own_descriptor.h"
#include "libc/next_symbols.h"

namespace qpsock {

ssize_t read_small_file(const char* path, char* buffer, size_t size) {
  const ErrnoGuard keep_errno;
  const int fd = next::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t length = 0;
  while (length + 1 < size) {
    const ssize_t got = next::read(fd, buffer + length, size - 1 - length);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    length += static_cast<size_t>(got);
  }
  close_descriptor(fd);
  buffer[length] = '\0';
  return static_cast<ssize_t>(length);
}

}  // namespace qpsock
