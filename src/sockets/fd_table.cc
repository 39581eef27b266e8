#include "sockets/fd_table.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <new>

#include "common/errno_guard.h"
#include "common/log.h"

namespace qpsock::sockets {
namespace {

// Linux's default fs.nr_open; a hard limit above it (or unlimited) is capped here.
constexpr size_t kMaximumCapacity = size_t{1} << 20;
constexpr size_t kMinimumCapacity = 1024;

std::atomic<uint64_t> next_generation{1};
std::atomic<bool> reported_overflow{false};

// word = generation << 16 | family << 8 | kind
uint64_t encode(const FdRecord& record) {
  return record.generation << 16 | uint64_t{record.family} << 8 |
         static_cast<uint64_t>(record.kind);
}

FdRecord decode(uint64_t word) {
  return FdRecord{static_cast<SocketKind>(word & 0xff), static_cast<uint8_t>(word >> 8 & 0xff),
                  word >> 16};
}

size_t capacity_from_rlimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return kMinimumCapacity;
  size_t capacity = limit.rlim_max == RLIM_INFINITY ? kMaximumCapacity
                                                    : static_cast<size_t>(limit.rlim_max);
  if (capacity > kMaximumCapacity) capacity = kMaximumCapacity;
  if (capacity < kMinimumCapacity) capacity = kMinimumCapacity;
  return capacity;
}

std::atomic<uint64_t>* map_entries(size_t capacity) {
  void* memory = mmap(nullptr, capacity * sizeof(std::atomic<uint64_t>), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  // Zero-filled pages are valid atomics holding 0 (untracked).
  return memory == MAP_FAILED ? nullptr : static_cast<std::atomic<uint64_t>*>(memory);
}

// Never destroyed: other threads may still use sockets while the process exits.
union ProcessTableStorage {
  constexpr ProcessTableStorage() : table() {}
  ~ProcessTableStorage() {}
  FdTable table;
};
constinit ProcessTableStorage process_table_storage;

}  // namespace

FdTable::FdTable(size_t capacity) : owns_mapping_(true) {
  capacity_.store(capacity, std::memory_order_relaxed);
  entries_.store(map_entries(capacity), std::memory_order_release);
}

FdTable::~FdTable() {
  if (owns_mapping_ && entries_.load() != nullptr) {
    munmap(entries_.load(), capacity_.load() * sizeof(std::atomic<uint64_t>));
  }
}

FdTable& FdTable::process_table() { return process_table_storage.table; }

std::atomic<uint64_t>* FdTable::entries() const {
  std::atomic<uint64_t>* current = entries_.load(std::memory_order_acquire);
  if (current != nullptr) [[likely]] return current;
  // First use. Racing threads (or a signal handler) each map; one wins, the
  // others unmap theirs. No lock, so nothing can deadlock here.
  ErrnoGuard errno_guard;
  size_t capacity = capacity_from_rlimit();
  std::atomic<uint64_t>* mapped = map_entries(capacity);
  if (mapped == nullptr) return nullptr;
  capacity_.store(capacity, std::memory_order_relaxed);
  std::atomic<uint64_t>* expected = nullptr;
  if (!entries_.compare_exchange_strong(expected, mapped, std::memory_order_acq_rel)) {
    munmap(mapped, capacity * sizeof(std::atomic<uint64_t>));
    return expected;
  }
  return mapped;
}

std::atomic<uint64_t>* FdTable::slot(int fd) const {
  std::atomic<uint64_t>* table = entries();
  if (table == nullptr || fd < 0) return nullptr;
  if (static_cast<size_t>(fd) >= capacity_.load(std::memory_order_relaxed)) return nullptr;
  return &table[fd];
}

size_t FdTable::capacity() const {
  entries();
  return capacity_.load(std::memory_order_relaxed);
}

uint64_t FdTable::track_new(int fd, SocketKind kind, uint8_t family) {
  std::atomic<uint64_t>* entry = slot(fd);
  if (entry == nullptr) {
    if (fd >= 0 && !reported_overflow.exchange(true)) {
      QPSOCK_LOG(warn, "fd %d is beyond the fd table (%zu entries, from RLIMIT_NOFILE); "
                 "such sockets stay on the kernel path", fd, capacity_.load());
    }
    return 0;
  }
  uint64_t generation = next_generation.fetch_add(1, std::memory_order_relaxed);
  entry->store(encode(FdRecord{kind, family, generation}), std::memory_order_release);
  return generation;
}

void FdTable::forget(int fd) {
  if (std::atomic<uint64_t>* entry = slot(fd)) entry->store(0, std::memory_order_release);
}

void FdTable::copy(int source, int destination) {
  std::atomic<uint64_t>* to = slot(destination);
  if (to == nullptr) return;
  std::atomic<uint64_t>* from = slot(source);
  to->store(from != nullptr ? from->load(std::memory_order_acquire) : 0,
            std::memory_order_release);
}

FdRecord FdTable::lookup(int fd) const {
  std::atomic<uint64_t>* entry = slot(fd);
  return entry != nullptr ? decode(entry->load(std::memory_order_acquire)) : FdRecord{};
}

}  // namespace qpsock::sockets
