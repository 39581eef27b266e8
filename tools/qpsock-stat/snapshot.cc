#include "snapshot.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace qpsock::stat_tool {
namespace format = stats::format;
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

uint64_t start_time_of(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::stringstream text;
  text << stat.rdbuf();
  return stat ? format::parse_start_time(text.str().c_str()) : 0;
}

bool pid_alive(pid_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

std::string endpoint_text(uint8_t family, uint16_t port, const uint8_t (&address)[16]) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (family == AF_INET) {
    inet_ntop(AF_INET, address, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(port);
  }
  if (family == AF_INET6) {
    inet_ntop(AF_INET6, address, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "?";
}

// A consistent copy of an open slot: the state word is the same before and
// after the copy, else the slot changed under us and the copy is retried.
bool copy_slot(const format::Slot& slot, uint32_t index, ConnectionSnapshot& row) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const uint64_t before = slot.state.load(std::memory_order_acquire);
    if (format::state_of(before) != format::SlotState::open) return false;
    row = ConnectionSnapshot{};
    row.slot = index;
    row.local = endpoint_text(slot.local_family, slot.local_port, slot.local_address);
    row.peer = endpoint_text(slot.peer_family, slot.peer_port, slot.peer_address);
    row.role = static_cast<format::Role>(slot.role);
    row.path = static_cast<format::Path>(slot.path.load(std::memory_order_acquire));
    row.opened_ns = slot.opened_ns;
    for (int direction = 0; direction < 2; ++direction) {
      for (int family = 0; family < 2; ++family)
        row.bytes[direction][family] = slot.bytes[direction][family].load(std::memory_order_relaxed);
      row.zero_copy[direction] = slot.zero_copy_bytes[direction].load(std::memory_order_relaxed);
    }
    row.decision.assign(slot.decision, strnlen(slot.decision, sizeof(slot.decision)));
    char reason[sizeof(slot.reason)];
    format::read_reason(slot, reason, sizeof(reason));
    row.reason = reason;
    for (const auto& user : slot.users) {
      const pid_t pid = user.load(std::memory_order_acquire);
      if (pid_alive(pid)) row.pids.push_back(pid);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.state.load(std::memory_order_relaxed) == before) return true;
  }
  return false;
}

bool valid_header(const format::FileHeader& header, size_t size) {
  return header.magic == format::kMagic && header.version == format::kVersion &&
         header.header_size == sizeof(format::FileHeader) && header.slot_size == sizeof(format::Slot) &&
         header.slot_count <= format::kMaximumSlotCount && size >= format::file_size(header.slot_count);
}

// Reads one file into `process`; false if it is not to be shown (not ours,
// malformed, or stale, in which case it is removed if we may).
bool read_file(const std::string& path, ProcessSnapshot& process) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  struct stat status {};
  void* mapping = MAP_FAILED;
  if (fstat(fd, &status) == 0 && S_ISREG(status.st_mode) &&
      static_cast<size_t>(status.st_size) >= sizeof(format::FileHeader)) {
    mapping = mmap(nullptr, static_cast<size_t>(status.st_size), PROT_READ, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (mapping == MAP_FAILED) return false;
  const size_t size = static_cast<size_t>(status.st_size);
  const auto& header = *static_cast<const format::FileHeader*>(mapping);
  bool shown = false;
  if (valid_header(header, size)) {
    process.pid = header.pid;
    process.start_time = header.start_time;
    process.program.assign(header.program, strnlen(header.program, sizeof(header.program)));
    process.file = path;
    process.alive = start_time_of(header.pid) == header.start_time && header.start_time != 0;
    process.dropped = header.dropped.load(std::memory_order_relaxed);
    const auto* slots = reinterpret_cast<const format::Slot*>(static_cast<const char*>(mapping) +
                                                             sizeof(format::FileHeader));
    const uint32_t used = std::min(header.used_slots.load(std::memory_order_acquire), header.slot_count);
    for (uint32_t index = 0; index < used; ++index) {
      ConnectionSnapshot row;
      // A row no live process holds is left over from one that was killed.
      if (copy_slot(slots[index], index, row) && !row.pids.empty()) process.connections.push_back(row);
    }
    std::sort(process.connections.begin(), process.connections.end(), [](const auto& a, const auto& b) {
      return a.opened_ns != b.opened_ns ? a.opened_ns < b.opened_ns : a.slot < b.slot;
    });
    shown = process.alive || !process.connections.empty();
    if (!shown) unlink(path.c_str());  // stale; EACCES/EPERM simply leave it
  }
  munmap(mapping, size);
  return shown;
}

}  // namespace

std::vector<std::string> stat_directories(const std::string& chosen) {
  if (!chosen.empty()) return {chosen};
  if (const char* variable = getenv("QPSOCK_STAT_DIR"); variable != nullptr && *variable != '\0')
    return {variable};
  const std::string user = std::to_string(geteuid());
  const std::string prefix = format::kPerUserPrefix;
  std::vector<std::string> directories{format::kSystemDirectory};
  for (const std::string parent : format::kPerUserParents) directories.push_back(parent + "/" + prefix + user);
  if (geteuid() == 0) {
    for (const std::string parent : format::kPerUserParents) {
      DIR* listing = opendir(parent.c_str());
      if (listing == nullptr) continue;
      while (dirent* entry = readdir(listing)) {
        std::string name = entry->d_name;
        std::string path = parent + "/" + name;
        if (name.rfind(prefix, 0) == 0 && name.size() > prefix.size() &&
            name.find_first_not_of("0123456789", prefix.size()) == std::string::npos &&
            std::find(directories.begin(), directories.end(), path) == directories.end())
          directories.push_back(path);
      }
      closedir(listing);
    }
  }
  return directories;
}

std::vector<ProcessSnapshot> read_processes(const std::vector<std::string>& directories) {
  std::vector<ProcessSnapshot> processes;
  for (const std::string& directory : directories) {
    DIR* listing = opendir(directory.c_str());
    if (listing == nullptr) continue;
    while (dirent* entry = readdir(listing)) {
      const std::string name = entry->d_name;
      if (name.empty() || name[0] == '.' || !ends_with(name, format::kFileSuffix)) continue;
      ProcessSnapshot process;
      if (read_file(directory + "/" + name, process)) processes.push_back(std::move(process));
    }
    closedir(listing);
  }
  std::sort(processes.begin(), processes.end(), [](const auto& a, const auto& b) {
    return a.pid != b.pid ? a.pid < b.pid : a.start_time < b.start_time;
  });
  return processes;
}

}  // namespace qpsock::stat_tool
