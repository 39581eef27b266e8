#include "upgrade/inherited_streams.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstring>
#include <memory>

#include "common/errno_guard.h"
#include "common/log.h"
#include "libc/next_symbols.h"
#include "upgrade/connection_registry.h"

namespace qpsock::upgrade {
namespace {

// The inodes the environment names; how many (at most `capacity`).
size_t parse_inodes(const char* text, uint64_t* inodes, size_t capacity) {
  size_t count = 0;
  while (*text != '\0' && count < capacity) {
    char* end = nullptr;
    const unsigned long long value = strtoull(text, &end, 10);
    if (end == text) break;
    if (value != 0) inodes[count++] = value;
    text = *end == ',' ? end + 1 : end;
  }
  return count;
}

bool named(uint64_t inode, const uint64_t* inodes, size_t count) {
  for (size_t index = 0; index < count; ++index)
    if (inodes[index] == inode) return true;
  return false;
}

}  // namespace

void InheritedStreamsMarker::add(uint64_t inode) {
  if (count_ == kMostSockets) return;
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
  uint64_t inodes[InheritedStreamsMarker::kMostSockets];
  const size_t count = parse_inodes(text, inodes, InheritedStreamsMarker::kMostSockets);
  unsetenv(kInheritedStreamsName);
  if (count == 0) return;
  DIR* directory = opendir("/proc/self/fd");
  if (directory == nullptr) return;
  while (dirent* entry = readdir(directory)) {
    char* end = nullptr;
    const long fd = strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(directory)) continue;
    struct stat status{};
    if (fstat(static_cast<int>(fd), &status) != 0 || !S_ISSOCK(status.st_mode) ||
        !named(status.st_ino, inodes, count))
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
