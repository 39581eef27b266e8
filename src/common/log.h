// qpsock's diagnostics. Silent by default except for warnings and errors
// (a bad config line, a forced fallback); never on stdout.
//
// QPSOCK_LOG_LEVEL = off | error | warn | info | debug | trace (default warn)
// QPSOCK_LOG_FILE  = a path to append to instead of stderr
#pragma once

#include <cstdarg>

namespace qpsock::log {

enum class Level { off = 0, error, warn, info, debug, trace };

// Parses a level name; returns false (and leaves level untouched) if unknown.
bool parse_level(const char* text, Level& level);
const char* level_name(Level level);

bool enabled(Level level);
// Formats into a fixed stack buffer and writes one line with one write(2):
// no allocation, no stdio, no lock, errno preserved.
void message(Level level, const char* format, ...) __attribute__((format(printf, 2, 3)));
void vmessage(Level level, const char* format, va_list arguments)
    __attribute__((format(printf, 2, 0)));

}  // namespace qpsock::log

#define QPSOCK_LOG(level, ...)                                                 \
  do {                                                                         \
    if (::qpsock::log::enabled(::qpsock::log::Level::level))                   \
      ::qpsock::log::message(::qpsock::log::Level::level, __VA_ARGS__);        \
  } while (0)
