#include "process/inherited_environment.h"

#include <dlfcn.h>
#include <sys/mman.h>

#include <cstring>

#include "common/errno_guard.h"
#include "common/startup_settings.h"
#include "upgrade/inherited_streams.h"

namespace qpsock::process {
namespace {

// Filled once at load: exec may run in a child where malloc's locks are held
// by threads that no longer exist.
char library_path[4096];

constexpr char kPreloadPrefix[] = "LD_PRELOAD=";
constexpr size_t kPreloadPrefixLength = sizeof(kPreloadPrefix) - 1;

const char* base_name(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

// True if the LD_PRELOAD value lists this library (by path or by file name).
bool preload_lists_library(const char* value) {
  const char* ours = base_name(library_path);
  size_t ours_length = strlen(ours);
  const char* cursor = value;
  while (*cursor != '\0') {
    size_t length = strcspn(cursor, ": ");
    if (length > 0) {
      // Compare the entry's last path component with our file name.
      const char* entry_end = cursor + length;
      const char* entry_base = entry_end;
      while (entry_base > cursor && entry_base[-1] != '/') --entry_base;
      if (static_cast<size_t>(entry_end - entry_base) == ours_length &&
          memcmp(entry_base, ours, ours_length) == 0) {
        return true;
      }
    }
    cursor += length;
    if (*cursor != '\0') ++cursor;
  }
  return false;
}

size_t name_length(const char* assignment) {
  const char* equals = strchr(assignment, '=');
  return equals != nullptr ? static_cast<size_t>(equals - assignment) : strlen(assignment);
}

bool has_variable(char* const* envp, const char* assignment) {
  size_t length = name_length(assignment) + 1;  // including '='
  for (char* const* entry = envp; entry != nullptr && *entry != nullptr; ++entry) {
    if (strncmp(*entry, assignment, length) == 0) return true;
  }
  return false;
}

// QPSOCK_INHERITED_STREAMS is not a setting: it names this process's own
// inherited sockets, and each exec names them anew.
bool is_inherited_streams(const char* assignment) {
  const size_t length = sizeof(upgrade::kInheritedStreamsName) - 1;
  return strncmp(assignment, upgrade::kInheritedStreamsName, length) == 0 && assignment[length] == '=';
}

const char* find_preload(char* const* envp) {
  for (char* const* entry = envp; entry != nullptr && *entry != nullptr; ++entry) {
    if (strncmp(*entry, kPreloadPrefix, kPreloadPrefixLength) == 0) return *entry;
  }
  return nullptr;
}

}  // namespace

void capture_inherited_environment() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&capture_inherited_environment), &info) != 0 &&
      info.dli_fname != nullptr && strlen(info.dli_fname) < sizeof(library_path)) {
    strcpy(library_path, info.dli_fname);
  }
  capture_startup_settings(upgrade::kInheritedStreamsName);
}

InheritedEnvironment::InheritedEnvironment(char* const* envp, const char* inherited_streams)
    : environment_(envp) {
  ErrnoGuard errno_guard;
  const char* preload = find_preload(envp);
  bool add_library = library_path[0] != '\0' &&
                     (preload == nullptr || !preload_lists_library(preload + kPreloadPrefixLength));
  size_t missing_settings = 0;
  for (size_t index = 0; index < startup_setting_count(); ++index) {
    if (!has_variable(envp, startup_setting_assignment(index))) ++missing_settings;
  }
  bool stale_streams = false;
  for (char* const* entry = envp; entry != nullptr && *entry != nullptr; ++entry)
    stale_streams = stale_streams || is_inherited_streams(*entry);
  if (!add_library && missing_settings == 0 && !stale_streams && inherited_streams == nullptr) return;

  size_t count = 0;
  while (envp != nullptr && envp[count] != nullptr) ++count;
  size_t pointer_bytes = (count + missing_settings + 3) * sizeof(char*);
  size_t preload_bytes = kPreloadPrefixLength + strlen(library_path) + 1 +
                         (preload != nullptr ? strlen(preload) : 0) + 1;
  mapping_size_ = pointer_bytes + preload_bytes;
  void* memory = mmap(nullptr, mapping_size_, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return;  // exec goes ahead without qpsock rather than fail
  mapping_ = memory;

  auto** copy = static_cast<char**>(memory);
  char* text = static_cast<char*>(memory) + pointer_bytes;
  size_t out = 0;
  if (add_library) {
    // Prepend: LD_PRELOAD=<ours> <what was there>
    char* cursor = text;
    memcpy(cursor, kPreloadPrefix, kPreloadPrefixLength);
    cursor += kPreloadPrefixLength;
    cursor = stpcpy(cursor, library_path);
    if (preload != nullptr && preload[kPreloadPrefixLength] != '\0') {
      *cursor++ = ' ';
      cursor = stpcpy(cursor, preload + kPreloadPrefixLength);
    }
    *cursor = '\0';
    copy[out++] = text;
  }
  for (size_t index = 0; index < count; ++index) {
    if (add_library && envp[index] == preload) continue;
    if (is_inherited_streams(envp[index])) continue;
    copy[out++] = envp[index];
  }
  for (size_t index = 0; index < startup_setting_count(); ++index) {
    char* setting = startup_setting_assignment(index);
    if (!has_variable(envp, setting)) copy[out++] = setting;
  }
  if (inherited_streams != nullptr) copy[out++] = const_cast<char*>(inherited_streams);
  copy[out] = nullptr;
  environment_ = copy;
}

InheritedEnvironment::~InheritedEnvironment() {
  if (mapping_ != nullptr) {
    ErrnoGuard errno_guard;
    munmap(mapping_, mapping_size_);
  }
}

}  // namespace qpsock::process
