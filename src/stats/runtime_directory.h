// Where this process's statistics file goes: $QPSOCK_STAT_DIR if set, else
// the first of /run/qpsock, /dev/shm/qpsock-<uid> and /tmp/qpsock-<uid>
// (stats_file_format.h) that this process can write in and that is in
// memory (tmpfs), else the first it can write in.
// Directories qpsock makes are mode 0700, and a per-user one that is not a
// real directory owned by this user is refused (another user could
// have made it to read our files).
#pragma once

#include <cstddef>

namespace qpsock::stats {

inline constexpr const char* kStatDirectoryVariable = "QPSOCK_STAT_DIR";

// Writes the directory into `path` (made if missing); false if there is no
// usable one. No allocation.
bool prepare_runtime_directory(char* path, size_t size);

}  // namespace qpsock::stats
