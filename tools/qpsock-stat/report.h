// qpsock-stat's two outputs: a table for people and JSON for scripts.
#pragma once

#include <ostream>
#include <vector>

#include "snapshot.h"

namespace qpsock::stat_tool {

// One block per process (pid, program), one row per connection.
void write_table(std::ostream& out, const std::vector<ProcessSnapshot>& processes);

// One JSON document, keys in a fixed order (qpsock-stat(1) documents them):
// {"version":1,"processes":[{"pid":..,"connections":[..]},..]}
void write_json(std::ostream& out, const std::vector<ProcessSnapshot>& processes);

}  // namespace qpsock::stat_tool
