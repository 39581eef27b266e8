#include "upgrade/inherited_streams.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "common/errno_guard.h"
#include "common/log.h"
#include "libc/next_symbols.h"
#include "upgrade/connection_registry.h"

namespace qpsock::upgrade {
namespace {

// Whether the environment's list, "INODE,INODE,...", names `inode`.
bool named(uint64_t inode, const char* text) {
  while (*text != '\0') {
    char* end = nullptr;
    const unsigned long long value = strtoull(text, &end, 10);
    if (end == text) return false;
    if (value == inode) return true;
    text = *end == ',' ? end + 1 : end;
  }
  return false;
}

}  // namespace

InheritedStreamsMarker::~InheritedStreamsMarker() {
  if (text_ != nullptr) munmap(text_, capacity_);
}

bool InheritedStreamsMarker::make_room(size_t bytes) {
  if (length_ + bytes + 1 <= capacity_) return true;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t wanted = capacity_ == 0 ? page : capacity_ * 2;
  while (wanted < length_ + bytes + 1) wanted *= 2;
  void* grown = text_ == nullptr
                    ? mmap(nullptr, wanted, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                    : mremap(text_, capacity_, wanted, MREMAP_MAYMOVE);
  if (grown == MAP_FAILED) return false;
  text_ = static_cast<char*>(grown);
  capacity_ = wanted;
  return true;
}

void InheritedStreamsMarker::add(uint64_t inode) {
  if (full_) return;
  // The name, "=", a comma and 20 digits at most. execve refuses (E2BIG)
  // an environment string longer than MAX_ARG_STRLEN (32 pages) with its null.
  constexpr size_t kLongestEntry = sizeof(kInheritedStreamsName) + 22;
  constexpr size_t kLongestAssignment = 32 * 4096 - 1;
  if (length_ + kLongestEntry > kLongestAssignment || !make_room(kLongestEntry)) {
    full_ = true;
    QPSOCK_LOG(error, "%s: cannot name more than %zu inherited sockets (the environment's "
               "limit, or no memory); the new program may find the others empty",
               kInheritedStreamsName, count_);
    return;
  }
  // By hand, not snprintf: this runs in forked children (async-signal-safe).
  if (count_ == 0) {
    memcpy(text_, kInheritedStreamsName, sizeof(kInheritedStreamsName) - 1);
    length_ = sizeof(kInheritedStreamsName) - 1;
    text_[length_++] = '=';
  } else {
    text_[length_++] = ',';
  }
  char digits[20];
  size_t count = 0;
  do {
    digits[count++] = static_cast<char>('0' + inode % 10);
    inode /= 10;
  } while (inode != 0);
  while (count > 0) text_[length_++] = digits[--count];
  text_[length_] = '\0';
  ++count_;
}

void adopt_inherited_streams() {
  const char* text = getenv(kInheritedStreamsName);
  if (text == nullptr) return;
  ErrnoGuard errno_guard;
  // unsetenv leaves the string itself alone (it belongs to the environment
  // block exec built), so `text` stays readable.
  unsetenv(kInheritedStreamsName);
  if (*text == '\0') return;
  DIR* directory = opendir("/proc/self/fd");
  if (directory == nullptr) return;
  while (dirent* entry = readdir(directory)) {
    char* end = nullptr;
    const long fd = strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(directory)) continue;
    struct stat status{};
    if (fstat(static_cast<int>(fd), &status) != 0 || !S_ISSOCK(status.st_mode) ||
        !named(status.st_ino, text))
      continue;
    auto connection = std::make_shared<Connection>(config::Role::client);
    connection->mark_inherited_stream();
    attach_connection(static_cast<int>(fd), std::move(connection));
    QPSOCK_LOG(debug, "fd %ld: inherited across exec from a process that does not own its "
               "upgraded stream; calls on it fail with ECONNRESET", fd);
  }
  closedir(directory);
}

}  // namespace qpsock::upgrade
