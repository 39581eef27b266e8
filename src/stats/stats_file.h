// Making and removing one process's statistics file (stats_file_format.h).
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>

#include "stats/process_identity.h"

namespace qpsock::stats {

struct StatsFile {
  void* mapping = nullptr;  // MAP_SHARED, format::file_size(slot_count) bytes
  size_t size = 0;
  char path[PATH_MAX] = {};
};

// Creates DIRECTORY/<pid>-<start time>.qpstat (mode 0600) with its header
// written and every slot free. The file is filled under a temporary name and
// renamed into place, so a reader never sees half a header. False on failure
// (nothing is left behind). Only system calls: no allocation.
bool create_stats_file(const char* directory, const ProcessIdentity& identity,
                       uint32_t slot_count, StatsFile& file);

void remove_stats_file(const StatsFile& file);
void unmap_stats_file(StatsFile& file);

}  // namespace qpsock::stats
