// Reading a small kernel file (/proc) without going through our own
// wrappers: the one way qpsock reads such a file.
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace qpsock {

// Reads up to size-1 bytes of `path` and NUL-terminates them: the length,
// or -1 if it cannot be opened. Leaves errno as it was.
ssize_t read_small_file(const char* path, char* buffer, size_t size);

}  // namespace qpsock
