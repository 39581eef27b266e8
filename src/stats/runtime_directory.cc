#include "stats/runtime_directory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/startup_settings.h"

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
  if (usable_directory(kSystemStatDirectory, true)) return copy_path(path, size, kSystemStatDirectory);
  int length = snprintf(path, size, "/tmp/qpsock-%u", static_cast<unsigned>(geteuid()));
  return length > 0 && static_cast<size_t>(length) < size && usable_directory(path, true);
}

}  // namespace qpsock::stats
