#include "upgrade/inherited_streams.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "common/errno_guard.h"
#include "common/log.h"
#include "libc/next_symbols.h"
#include "upgrade/connection_registry.h"

namespace qpsock::upgrade {
namespace {

// The environment's list, "INODE,INODE,...", sorted: a program may hold
// thousands of sockets and the list name as many (looking each socket up in
// the text took a second at start then).
std::vector<uint64_t> named_inodes(const char* text) {
  std::vector<uint64_t> inodes;
  while (*text != '\0') {
    char* end = nullptr;
    const unsigned long long value = strtoull(text, &end, 10);
    if (end == text) break;
    inodes.push_back(value);
    text = *end == ',' ? end + 1 : end;
  }
  std::sort(inodes.begin(), inodes.end());
  return inodes;
}

}  // namespace

void InheritedStreamsMarker::add(uint64_t inode) {
  if (full_) return;
  // The name, "=", a comma and 20 digits at most. execve refuses (E2BIG)
  // an environment string longer than MAX_ARG_STRLEN (32 pages) with its
  // null: that much is mapped at the first socket (pages are only touched
  // as the list grows).
  constexpr size_t kLongestEntry = sizeof(kInheritedStreamsName) + 22;
  constexpr size_t kLongestAssignment = 32 * 4096 - 1;
  if (length_ + kLongestEntry > kLongestAssignment ||
      (memory_.empty() && memory_.map(kLongestAssignment + 1) < 0)) {
    full_ = true;
    QPSOCK_LOG(error, "%s: cannot name more than %zu inherited sockets (the environment's "
               "limit, or no memory); the new program may find the others empty",
               kInheritedStreamsName, count_);
    return;
  }
  char* text = reinterpret_cast<char*>(memory_.data());
  // By hand, not snprintf: this runs in forked children (async-signal-safe).
  if (count_ == 0) {
    memcpy(text, kInheritedStreamsName, sizeof(kInheritedStreamsName) - 1);
    length_ = sizeof(kInheritedStreamsName) - 1;
    text[length_++] = '=';
  } else {
    text[length_++] = ',';
  }
  char digits[20];
  size_t count = 0;
  do {
    digits[count++] = static_cast<char>('0' + inode % 10);
    inode /= 10;
  } while (inode != 0);
  while (count > 0) text[length_++] = digits[--count];
  text[length_] = '\0';
  ++count_;
}

void adopt_inherited_streams() {
  const char* text = getenv(kInheritedStreamsName);
  if (text == nullptr) return;
  ErrnoGuard errno_guard;
  // unsetenv leaves the string itself alone (it belongs to the environment
  // block exec built), so `text` stays readable.
  unsetenv(kInheritedStreamsName);
  const std::vector<uint64_t> inodes = named_inodes(text);
  if (inodes.empty()) return;
  DIR* directory = opendir("/proc/self/fd");
  if (directory == nullptr) return;
  while (dirent* entry = readdir(directory)) {
    char* end = nullptr;
    const long fd = strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(directory)) continue;
    struct stat status{};
    if (fstat(static_cast<int>(fd), &status) != 0 || !S_ISSOCK(status.st_mode) ||
        !std::binary_search(inodes.begin(), inodes.end(), uint64_t{status.st_ino}))
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
