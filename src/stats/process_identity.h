// Who this process is, for the header of its statistics file: pid, start time
// (which, with the pid, tells a live process from a later one that reused the
// pid) and program name. Read with raw file calls into fixed buffers: no
// allocation, so it may run from any context.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace qpsock::stats {

struct ProcessIdentity {
  pid_t pid = 0;
  uint64_t start_time = 0;  // /proc/PID/stat field 22; 0 if unreadable
  char program[64] = {};
};

ProcessIdentity identify_this_process();

// The start time of `pid`, or 0 if there is no such process (or it is unreadable).
uint64_t process_start_time(pid_t pid);

}  // namespace qpsock::stats
