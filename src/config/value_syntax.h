// The value syntax of tunables: sizes (plain bytes or a binary K/M/G suffix)
// and durations (always with a unit, except 0). Error texts are complete
// phrases that quote the value, ready to follow "NAME: ".
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "config/parse_outcome.h"

namespace qpsock::config {

// Decimal digits only: no sign, no spaces, no hexadecimal.
ParseOutcome<uint64_t> parse_unsigned(std::string_view text);
// "4096", "64K", "64KiB", "1M", "1MiB", "2G", "2GiB"; K = 1024.
ParseOutcome<uint64_t> parse_size(std::string_view text);
// "20us", "5ms", "2s", or "0".
ParseOutcome<std::chrono::microseconds> parse_duration(std::string_view text);

// The shortest exact spelling that parse_size accepts back: 65536 -> "64K".
std::string format_size(uint64_t bytes);
// The shortest exact spelling that parse_duration accepts back: 2000ms -> "2s".
std::string format_duration(std::chrono::microseconds duration);

}  // namespace qpsock::config
