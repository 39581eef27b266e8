// What qpsock-stat reads out of the statistics files: a consistent copy of
// each live process's header and connection rows.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "stats/stats_file_format.h"

namespace qpsock::stat_tool {

struct ConnectionSnapshot {
  std::string local, peer;  // "127.0.0.1:80", "[::1]:80", or "?"
  stats::format::Role role = stats::format::Role::client;
  stats::format::Path path = stats::format::Path::kernel;
  std::string decision, reason;
  uint64_t bytes[2][2] = {};  // [Direction][PathFamily], as in the file
  uint64_t zero_copy[2] = {};  // [Direction]: of the offloaded bytes, those moved zero-copy
  std::vector<pid_t> pids;    // live processes holding the socket
  uint64_t opened_ns = 0;
  uint32_t slot = 0;
};

struct ProcessSnapshot {
  pid_t pid = 0;
  uint64_t start_time = 0;
  std::string program, file;
  bool alive = true;     // false: exited, but a child still holds one of its rows
  uint64_t dropped = 0;  // connections not recorded (table full)
  std::vector<ConnectionSnapshot> connections;
};

// The directories to read: `chosen` if not empty, else $QPSOCK_STAT_DIR if
// set, else /run/qpsock, /dev/shm/qpsock-<uid> and /tmp/qpsock-<uid> (for
// root, every /dev/shm/qpsock-* and /tmp/qpsock-*).
std::vector<std::string> stat_directories(const std::string& chosen);

// Reads every statistics file in `directories`, sorted by pid. Files of
// processes that are gone (pid absent, or reused: the start time differs)
// and whose rows no live process holds are removed where permitted and skipped.
std::vector<ProcessSnapshot> read_processes(const std::vector<std::string>& directories);

}  // namespace qpsock::stat_tool
