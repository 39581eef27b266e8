#include "stats/process_identity.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "common/small_file.h"
#include "stats/stats_file_format.h"

namespace qpsock::stats {
namespace {

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
