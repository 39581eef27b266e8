// Per-connection statistics of this process, for qpsock-stat(1): which path
// each tracked TCP connection takes (pending, kernel, shm, rdma), why, and
// the bytes it moved each way over TCP and over the offloaded path.
//
// The interposer calls these from application threads and signal handlers:
// they never allocate after the process's statistics file exists, never
// block, never write to stdout and leave errno alone. The file is made on
// the first open_connection, never at library load. See registry.h for
// handles, fork, exec and exit, and stats_file_format.h for the file.
//
// Typical use (the socket layer keeps one Handle per fd):
//   Handle h = stats::open_connection(local, peer, Role::client, Path::pending,
//                                     "rule 2 (/etc/qpsock.conf:5): offload",
//                                     "upgrade in progress");
//   stats::add_sent(h, n);                    // bytes over kernel TCP
//   stats::set_path(h, Path::shm, "upgraded to shared memory");
//   stats::add_sent(h, n, Path::shm);         // bytes over the stream
//   stats::close_connection(h);               // at close(2) of the fd
#pragma once

#include <sys/socket.h>

#include <cstdint>

#include "stats/registry.h"

namespace qpsock::stats {

Registry& process_registry();

// A new connection; 0 when it is not recorded (that is never an error: every
// other call accepts 0 and does nothing).
inline Handle open_connection(const sockaddr* local, const sockaddr* peer, Role role, Path path,
                              const char* decision, const char* reason) {
  return process_registry().open(local, peer, role, path, decision, reason);
}

// The connection is on `path` now, because of `reason` (copied, truncated to 95 bytes).
inline void set_path(Handle handle, Path path, const char* reason) {
  process_registry().set_path(handle, path, reason);
}

// Bytes that went out / came in over `path`: kernel counts as TCP, shm and
// rdma as offloaded. Relaxed atomic adds: a few nanoseconds.
inline void add_sent(Handle handle, uint64_t bytes, Path path = Path::kernel) {
  process_registry().add_bytes(handle, Direction::sent, path, bytes);
}
inline void add_received(Handle handle, uint64_t bytes, Path path = Path::kernel) {
  process_registry().add_bytes(handle, Direction::received, path, bytes);
}

// Of the bytes counted as offloaded, `bytes` more moved zero-copy.
inline void add_zero_copy(Handle handle, Direction direction, uint64_t bytes) {
  process_registry().add_zero_copy(handle, direction, bytes);
}

// Another fd of this process refers to the connection (dup, dup2, F_DUPFD).
inline void add_reference(Handle handle) { process_registry().add_reference(handle); }
// close(2) of one fd on the connection; the last fd of the last process frees the slot.
inline void close_connection(Handle handle) { process_registry().close(handle); }

// Around fork(2) (the fork wrapper).
void before_fork();
void after_fork(pid_t result);
// Before exec (lock-free, atomics and an unlink): what a normal exit does,
// so that the file does not stay behind for qpsock-stat to remove.
void before_image_ends();
// The same before _exit or _Exit (perhaps in a signal handler), after which
// nothing of the image runs.
void before_immediate_exit();

}  // namespace qpsock::stats
