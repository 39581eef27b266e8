// Writing the text fields of a slot (stats_file_format.h) without locks or
// allocation; reading them back is format::read_reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>

#include "stats/stats_file_format.h"

namespace qpsock::stats {

// Copies `text` (null: "") into `field`, truncated, always NUL-terminated.
void copy_text(char* field, size_t size, const char* text);

// Replaces the slot's reason under its seqlock. If another writer is
// changing it right now (two threads, or a signal handler that interrupted
// one), this one gives up rather than wait: the path is still updated.
void write_reason(format::Slot& slot, const char* reason);

inline uint64_t realtime_ns() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000000000u + static_cast<uint64_t>(now.tv_nsec);
}

}  // namespace qpsock::stats
