#include "common/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/errno_guard.h"
#include "common/own_descriptor.h"
#include "common/startup_settings.h"
#include "libc/next_symbols.h"

namespace qpsock::log {
namespace {

constexpr int kUnset = -1;
std::atomic<int> current_level{kUnset};
// The log file's path, copied once (the program's environment, where it may
// come from, can change under us) by the first thread to log, and published
// when complete.
std::atomic<bool> log_file_claimed{false};
char log_file_storage[512];
std::atomic<const char*> log_file{nullptr};

constexpr const char* kLevelNames[] = {"off", "error", "warn", "info", "debug", "trace"};

Level level_from_environment() {
  Level level = Level::warn;
  if (const char* text = startup_setting("QPSOCK_LOG_LEVEL"); text != nullptr && *text != '\0') {
    if (!parse_level(text, level)) level = Level::warn;
  }
  return level;
}

void publish_log_file() {
  if (log_file_claimed.exchange(true, std::memory_order_acq_rel)) return;
  const char* path = startup_setting("QPSOCK_LOG_FILE");
  if (path != nullptr && strlen(path) < sizeof(log_file_storage)) strcpy(log_file_storage, path);
  log_file.store(log_file_storage, std::memory_order_release);
}

void write_line(const char* line, size_t length) {
  const char* path = log_file.load(std::memory_order_acquire);
  // A thread that logs while the first one is still copying the path.
  if (path == nullptr) path = startup_setting("QPSOCK_LOG_FILE");
  if (path != nullptr && path[0] != '\0') {
    // Opened per line: the program may close or dup2 over any fd we kept.
    int fd = next::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
      next::write(fd, line, length);
      close_descriptor(fd);
      return;
    }
  }
  next::write(STDERR_FILENO, line, length);
}

}  // namespace

bool parse_level(const char* text, Level& level) {
  for (int index = 0; index < static_cast<int>(std::size(kLevelNames)); ++index) {
    if (strcasecmp(text, kLevelNames[index]) == 0) {
      level = static_cast<Level>(index);
      return true;
    }
  }
  if (strcasecmp(text, "warning") == 0) {
    level = Level::warn;
    return true;
  }
  return false;
}

const char* level_name(Level level) { return kLevelNames[static_cast<int>(level)]; }

bool enabled(Level level) {
  int current = current_level.load(std::memory_order_relaxed);
  if (current == kUnset) [[unlikely]] {
    ErrnoGuard errno_guard;
    publish_log_file();
    current = static_cast<int>(level_from_environment());
    current_level.store(current, std::memory_order_relaxed);
  }
  return level != Level::off && static_cast<int>(level) <= current;
}

void vmessage(Level level, const char* format, va_list arguments) {
  ErrnoGuard errno_guard;
  char line[1024];
  int prefix = snprintf(line, sizeof(line), "qpsock[%d]: %s: ", static_cast<int>(getpid()),
                        level_name(level));
  int body = vsnprintf(line + prefix, sizeof(line) - prefix - 1, format, arguments);
  size_t length = static_cast<size_t>(prefix) +
                  (body < 0 ? 0 : std::min<size_t>(body, sizeof(line) - prefix - 2));
  line[length++] = '\n';
  write_line(line, length);
}

void message(Level level, const char* format, ...) {
  va_list arguments;
  va_start(arguments, format);
  vmessage(level, format, arguments);
  va_end(arguments);
}

}  // namespace qpsock::log
