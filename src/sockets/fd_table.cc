#include "sockets/fd_table.h"

#include "common/errno_guard.h"
#include "common/log.h"

namespace qpsock::sockets {
namespace {

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

// Never destroyed: other threads may still use sockets while the process exits.
union ProcessTableStorage {
  constexpr ProcessTableStorage() : table() {}
  ~ProcessTableStorage() {}
  FdTable table;
};
constinit ProcessTableStorage process_table_storage;

}  // namespace

FdTable& FdTable::process_table() { return process_table_storage.table; }

uint64_t FdTable::track_new(int fd, SocketKind kind, uint8_t family) {
  Entry* entry = slot(fd);
  if (entry == nullptr) {
    if (fd >= 0 && !reported_overflow.exchange(true)) {
      QPSOCK_LOG(warn, "fd %d is beyond the fd table (%zu entries, from RLIMIT_NOFILE); "
                 "such sockets stay on the kernel path", fd, capacity());
    }
    return 0;
  }
  uint64_t generation = next_generation.fetch_add(1, std::memory_order_relaxed);
  // A handle left by an fd closed behind our back (a raw syscall) must not
  // count this socket's bytes.
  entry->stats.store(0, std::memory_order_release);
  entry->buffer_sizes.store(0, std::memory_order_relaxed);
  entry->record.store(encode(FdRecord{kind, family, generation}), std::memory_order_release);
  return generation;
}

void FdTable::forget(int fd) {
  if (Entry* entry = slot(fd)) {
    entry->stats.store(0, std::memory_order_release);
    entry->buffer_sizes.store(0, std::memory_order_relaxed);
    entry->record.store(0, std::memory_order_release);
  }
}

void FdTable::copy(int source, int destination) {
  Entry* to = slot(destination);
  if (to == nullptr) return;
  Entry* from = slot(source);
  to->buffer_sizes.store(from != nullptr ? from->buffer_sizes.load(std::memory_order_relaxed) : 0,
                         std::memory_order_relaxed);
  to->record.store(from != nullptr ? from->record.load(std::memory_order_acquire) : 0,
                   std::memory_order_release);
}

void FdTable::set_receive_buffer(int fd, uint32_t bytes) {
  if (Entry* entry = slot(fd)) {
    uint64_t sizes = entry->buffer_sizes.load(std::memory_order_relaxed);
    while (!entry->buffer_sizes.compare_exchange_weak(sizes, (sizes & ~uint64_t{0xffffffff}) | bytes,
                                                      std::memory_order_relaxed)) {
    }
  }
}

void FdTable::set_send_buffer(int fd, uint32_t bytes) {
  if (Entry* entry = slot(fd)) {
    uint64_t sizes = entry->buffer_sizes.load(std::memory_order_relaxed);
    while (!entry->buffer_sizes.compare_exchange_weak(
        sizes, (sizes & uint64_t{0xffffffff}) | (uint64_t{bytes} << 32), std::memory_order_relaxed)) {
    }
  }
}

FdTable::BufferSizes FdTable::buffer_sizes(int fd) const {
  const Entry* entry = slot(fd);
  const uint64_t sizes = entry != nullptr ? entry->buffer_sizes.load(std::memory_order_relaxed) : 0;
  return BufferSizes{static_cast<uint32_t>(sizes), static_cast<uint32_t>(sizes >> 32)};
}

void FdTable::inherit_buffer_sizes(int listener, int accepted) {
  Entry* to = slot(accepted);
  const Entry* from = slot(listener);
  if (to != nullptr && from != nullptr)
    to->buffer_sizes.store(from->buffer_sizes.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

FdRecord FdTable::lookup(int fd) const {
  Entry* entry = slot(fd);
  return entry != nullptr ? decode(entry->record.load(std::memory_order_acquire)) : FdRecord{};
}

uint64_t FdTable::exchange_stats_handle(int fd, uint64_t handle) {
  Entry* entry = slot(fd);
  return entry != nullptr ? entry->stats.exchange(handle, std::memory_order_acq_rel) : 0;
}

}  // namespace qpsock::sockets
