#include "common/startup_settings.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace qpsock {
namespace {

// Fixed storage filled at load: exec may run in a forked child where malloc's
// locks are held by threads that no longer exist, and a lookup may run in a
// signal handler's log line.
constexpr size_t kStorageCapacity = 8192;
constexpr size_t kMaximumSettings = 64;
char storage[kStorageCapacity];
char* assignments[kMaximumSettings];
size_t assignment_count = 0;
std::atomic<bool> captured{false};

// Whether "NAME=value" assigns `name`.
bool assigns(const char* assignment, const char* name) {
  const size_t length = strlen(name);
  return strncmp(assignment, name, length) == 0 && assignment[length] == '=';
}

}  // namespace

void capture_startup_settings(const char* not_a_setting) {
  size_t used = 0;
  size_t count = 0;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    if (strncmp(*entry, "QPSOCK_", 7) != 0) continue;
    if (not_a_setting != nullptr && assigns(*entry, not_a_setting)) continue;
    size_t length = strlen(*entry) + 1;
    if (count == kMaximumSettings || used + length > kStorageCapacity) break;
    assignments[count++] = static_cast<char*>(memcpy(storage + used, *entry, length));
    used += length;
  }
  assignment_count = count;
  captured.store(true, std::memory_order_release);
}

const char* startup_setting(const char* name) {
  if (const char* live = getenv(name); live != nullptr) return live;
  if (!captured.load(std::memory_order_acquire)) return nullptr;
  for (size_t index = 0; index < assignment_count; ++index) {
    if (assigns(assignments[index], name)) return assignments[index] + strlen(name) + 1;
  }
  return nullptr;
}

size_t startup_setting_count() { return assignment_count; }

char* startup_setting_assignment(size_t index) { return assignments[index]; }

}  // namespace qpsock
