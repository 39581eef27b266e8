#include "stats/stats_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <new>

#include "common/own_descriptor.h"
#include "libc/next_symbols.h"
#include "stats/slot_text.h"
#include "stats/stats_file_format.h"

namespace qpsock::stats {
namespace {

void write_header(void* mapping, const ProcessIdentity& identity, uint32_t slot_count) {
  // A fresh file is all zeros: every slot is already free (state 0).
  auto* header = new (mapping) format::FileHeader{};
  header->magic = format::kMagic;
  header->version = format::kVersion;
  header->header_size = sizeof(format::FileHeader);
  header->slot_size = sizeof(format::Slot);
  header->slot_count = slot_count;
  header->pid = identity.pid;
  header->start_time = identity.start_time;
  header->created_ns = realtime_ns();
  memcpy(header->program, identity.program, sizeof(header->program));
  header->program[sizeof(header->program) - 1] = '\0';
}

}  // namespace

bool create_stats_file(const char* directory, const ProcessIdentity& identity,
                       uint32_t slot_count, StatsFile& file) {
  int length = snprintf(file.path, sizeof(file.path), "%s/%d-%llu%s", directory,
                        static_cast<int>(identity.pid),
                        static_cast<unsigned long long>(identity.start_time), format::kFileSuffix);
  char temporary[PATH_MAX];
  int temporary_length =
      snprintf(temporary, sizeof(temporary), "%s/.%d.%ld.tmp", directory,
               static_cast<int>(identity.pid), static_cast<long>(syscall(SYS_gettid)));
  if (length <= 0 || static_cast<size_t>(length) >= sizeof(file.path) || temporary_length <= 0 ||
      static_cast<size_t>(temporary_length) >= sizeof(temporary)) {
    return false;
  }
  const size_t size = format::file_size(slot_count);
  int fd = next::open(temporary, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return false;
  void* mapping = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(size)) == 0) {
    mapping = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  close_descriptor(fd);
  if (mapping == MAP_FAILED) {
    unlink(temporary);
    return false;
  }
  write_header(mapping, identity, slot_count);
  if (rename(temporary, file.path) != 0) {
    munmap(mapping, size);
    unlink(temporary);
    return false;
  }
  file.mapping = mapping;
  file.size = size;
  return true;
}

void remove_stats_file(const StatsFile& file) {
  if (file.path[0] != '\0') unlink(file.path);
}

void unmap_stats_file(StatsFile& file) {
  if (file.mapping != nullptr) munmap(file.mapping, file.size);
  file.mapping = nullptr;
}

}  // namespace qpsock::stats
