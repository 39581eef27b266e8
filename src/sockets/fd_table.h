// Which file descriptors are TCP sockets that qpsock tracks.
//
// One 64-bit atomic word per fd, so every operation is lock-free: safe under
// threads, in signal handlers and across fork (no lock can be held by a thread
// that fork left behind). The words live in an anonymous mapping sized from
// RLIMIT_NOFILE's hard limit, made on first use; pages are only touched for
// fds that are used. An fd beyond the table is simply never tracked.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

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
  explicit FdTable(size_t capacity);
  ~FdTable();
  FdTable(const FdTable&) = delete;
  FdTable& operator=(const FdTable&) = delete;

  static FdTable& process_table();

  // Records a newly created socket; returns its generation.
  uint64_t track_new(int fd, SocketKind kind, uint8_t family);
  void forget(int fd);
  // destination now refers to what source refers to (dup, dup2, dup3, F_DUPFD).
  void copy(int source, int destination);
  FdRecord lookup(int fd) const;

  size_t capacity() const;

 private:
  std::atomic<uint64_t>* slot(int fd) const;
  std::atomic<uint64_t>* entries() const;

  mutable std::atomic<std::atomic<uint64_t>*> entries_{nullptr};
  mutable std::atomic<size_t> capacity_{0};
  bool owns_mapping_ = false;
};

}  // namespace qpsock::sockets
