#include "stats/runtime_directory.h"

#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>

#include "common/startup_settings.h"
#include "stats/stats_file_format.h"

namespace qpsock::stats {
namespace {

// Makes `path` (mode 0700) if missing; true if it is then a directory we can write in.
bool usable_directory(const char* path, bool must_own) {
  if (mkdir(path, 0700) != 0 && errno != EEXIST) return false;
  struct stat status {};
  if (lstat(path, &status) != 0 || !S_ISDIR(status.st_mode)) return false;
  if (must_own && (status.st_uid != geteuid() || (status.st_mode & 077) != 0)) return false;
  return access(path, W_OK | X_OK) == 0;
}

// Whether `path` is on a filesystem in memory (tmpfs, ramfs). A statistics
// file elsewhere is written through to a disk: its first write alone took
// milliseconds on ext4, on the first connection of every process.
bool in_memory(const char* path) {
  struct statfs filesystem {};
  return statfs(path, &filesystem) == 0 &&
         (filesystem.f_type == static_cast<decltype(filesystem.f_type)>(TMPFS_MAGIC) ||
          filesystem.f_type == static_cast<decltype(filesystem.f_type)>(RAMFS_MAGIC));
}

bool copy_path(char* path, size_t size, const char* text) {
  int length = snprintf(path, size, "%s", text);
  return length > 0 && static_cast<size_t>(length) < size;
}

}  // namespace

bool prepare_runtime_directory(char* path, size_t size) {
  // The user's explicit choice: made if missing, otherwise taken as it is.
  if (const char* chosen = startup_setting(kStatDirectoryVariable); chosen != nullptr && *chosen != '\0') {
    return copy_path(path, size, chosen) && usable_directory(path, false);
  }
  // The first usable one in memory, else the first usable one.
  constexpr size_t kPerUser = std::size(format::kPerUserParents);
  char per_user[kPerUser][64];
  const char* candidates[1 + kPerUser] = {format::kSystemDirectory};
  for (size_t index = 0; index < kPerUser; ++index) {
    snprintf(per_user[index], sizeof(per_user[index]), "%s/%s%u", format::kPerUserParents[index],
             format::kPerUserPrefix, static_cast<unsigned>(geteuid()));
    candidates[1 + index] = per_user[index];
  }
  const char* usable = nullptr;
  for (const char* candidate : candidates) {
    if (!usable_directory(candidate, true)) continue;
    if (in_memory(candidate)) return copy_path(path, size, candidate);
    if (usable == nullptr) usable = candidate;
  }
  return usable != nullptr && copy_path(path, size, usable);
}

}  // namespace qpsock::stats
