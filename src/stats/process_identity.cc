#include "stats/process_identity.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "libc/next_symbols.h"
#include "stats/stats_file_format.h"

namespace qpsock::stats {
namespace {

// Reads up to size-1 bytes of a small /proc file; NUL-terminates. Returns the length or -1.
ssize_t read_small_file(const char* path, char* buffer, size_t size) {
  int fd = next::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t length = 0;
  while (length + 1 < size) {
    ssize_t got = next::read(fd, buffer + length, size - 1 - length);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    length += static_cast<size_t>(got);
  }
  next::close(fd);
  buffer[length] = '\0';
  return static_cast<ssize_t>(length);
}

void copy_name(char* destination, size_t size, const char* source, size_t length) {
  if (length >= size) length = size - 1;
  memcpy(destination, source, length);
  destination[length] = '\0';
}

void read_program_name(char* program, size_t size) {
  char text[256];
  ssize_t length = read_small_file("/proc/self/comm", text, sizeof(text));
  if (length > 0) {
    if (text[length - 1] == '\n') --length;
    copy_name(program, size, text, static_cast<size_t>(length));
    return;
  }
  // No comm (an odd /proc): argv[0] from the command line, without its directory.
  length = read_small_file("/proc/self/cmdline", text, sizeof(text));
  if (length > 0) {
    const char* slash = strrchr(text, '/');
    const char* name = slash != nullptr ? slash + 1 : text;
    copy_name(program, size, name, strlen(name));
    return;
  }
  copy_name(program, size, "?", 1);
}

}  // namespace

uint64_t process_start_time(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  char text[1024];
  if (read_small_file(path, text, sizeof(text)) <= 0) return 0;
  return format::parse_start_time(text);
}

ProcessIdentity identify_this_process() {
  ProcessIdentity identity;
  identity.pid = getpid();
  identity.start_time = process_start_time(identity.pid);
  read_program_name(identity.program, sizeof(identity.program));
  return identity;
}

}  // namespace qpsock::stats
