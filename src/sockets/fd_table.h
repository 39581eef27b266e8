// Which file descriptors are TCP sockets that qpsock tracks.
//
// One 64-bit atomic word per fd, so every operation is lock-free: safe under
// threads, in signal handlers and across fork (no lock can be held by a thread
// that fork left behind). The words live in an anonymous mapping sized from
// RLIMIT_NOFILE's hard limit, made on first use; pages are only touched for
// fds that are used. An fd beyond the table is simply never tracked.
//
// Beside each fd's record sits a second word: the fd's connection statistics
// handle (src/stats), 0 when the connection is not recorded.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/fd_indexed_array.h"

namespace qpsock::sockets {

enum class SocketKind : uint8_t {
  untracked = 0,   // not a socket qpsock tracks: every call passes straight through
  tcp = 1,         // an AF_INET/AF_INET6 stream socket (listening or connected)
};

struct FdRecord {
  SocketKind kind = SocketKind::untracked;
  uint8_t family = 0;        // AF_INET or AF_INET6
  uint64_t generation = 0;   // tells apart two sockets that had the same fd number

  bool tracked() const { return kind != SocketKind::untracked; }
  bool operator==(const FdRecord&) const = default;
};

class FdTable {
 public:
  // The process's table: sized on first use.
  constexpr FdTable() = default;
  // A table of a fixed size (tests).
  explicit FdTable(size_t capacity) : entries_(capacity) {}
  FdTable(const FdTable&) = delete;
  FdTable& operator=(const FdTable&) = delete;

  static FdTable& process_table();

  // Records a newly created socket; returns its generation.
  uint64_t track_new(int fd, SocketKind kind, uint8_t family);
  void forget(int fd);
  // destination now refers to what source refers to (dup, dup2, dup3, F_DUPFD).
  void copy(int source, int destination);
  FdRecord lookup(int fd) const;

  // The fd's statistics handle (stats::Handle), 0 if none. forget() clears it.
  uint64_t stats_handle(int fd) const {
    const Entry* entry = slot(fd);
    return entry != nullptr ? entry->stats.load(std::memory_order_acquire) : 0;
  }
  // Stores a new handle and returns the one it replaces.
  uint64_t exchange_stats_handle(int fd, uint64_t handle);

  // SO_RCVBUF / SO_SNDBUF as the application set them (0: never set): an
  // upgraded stream sizes its ring and send window from them. Cleared by
  // track_new and forget, copied by copy and inherit_buffer_sizes.
  struct BufferSizes {
    uint32_t receive = 0;
    uint32_t send = 0;
  };
  void set_receive_buffer(int fd, uint32_t bytes);
  void set_send_buffer(int fd, uint32_t bytes);
  BufferSizes buffer_sizes(int fd) const;
  // An accepted socket starts with its listener's sizes, as in the kernel.
  void inherit_buffer_sizes(int listener, int accepted);

  size_t capacity() const { return entries_.capacity(); }

 private:
  struct Entry {
    std::atomic<uint64_t> record;        // see fd_table.cc for the encoding
    std::atomic<uint64_t> stats;         // stats::Handle
    std::atomic<uint64_t> buffer_sizes;  // send << 32 | receive
  };
  Entry* slot(int fd) const { return entries_.at(fd); }

  FdIndexedArray<Entry> entries_;
};

}  // namespace qpsock::sockets
