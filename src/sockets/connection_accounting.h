// The socket layer's side of the connection statistics (src/stats): which
// statistics row each fd's connection has, and the bytes that data calls move
// straight through the kernel. Kept apart from the entry points so that they
// each gain one line.
//
// Bytes that go through an upgrade::Connection are not counted here: the
// Connection knows which of them crossed TCP and which the stream, and
// counts them itself with connection_stats_handle(fd) and stats::add_sent /
// add_received (Path::kernel or Path::shm), and settles the path with
// stats::set_path.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>

#include "config/config.h"
#include "sockets/connection_policy.h"
#include "sockets/fd_table.h"
#include "stats/connection_stats.h"

namespace qpsock::sockets {

// connect (succeeded or in progress) or accept established a tracked
// connection between `endpoints`, and the configuration decided `decision` for it.
void record_connection(int fd, config::Role role, const config::Decision& decision,
                       const ConnectionEndpoints& endpoints);
// dup, dup2, dup3, F_DUPFD: destination now refers to source's connection.
void record_fd_copy(int source, int destination);
// close(fd), before the kernel's.
void record_fd_close(int fd);

// The statistics handle of fd's connection (0: not recorded).
inline stats::Handle connection_stats_handle(int fd) {
  return FdTable::process_table().stats_handle(fd);
}

// Out of line: only tracked connections get here.
void count_kernel_bytes(stats::Handle handle, stats::Direction direction, uint64_t bytes);

// Wrap a data call that went straight to the kernel: counts a positive
// result as bytes over TCP and returns it unchanged.
inline ssize_t count_sent(int fd, ssize_t result) {
  if (result > 0) {
    if (const stats::Handle handle = connection_stats_handle(fd))
      count_kernel_bytes(handle, stats::Direction::sent, static_cast<uint64_t>(result));
  }
  return result;
}
inline ssize_t count_received(int fd, ssize_t result, int flags = 0) {
  // MSG_PEEK leaves the bytes in the socket: they are counted when read.
  if (result > 0 && (flags & MSG_PEEK) == 0) {
    if (const stats::Handle handle = connection_stats_handle(fd))
      count_kernel_bytes(handle, stats::Direction::received, static_cast<uint64_t>(result));
  }
  return result;
}
// sendmmsg / recvmmsg: `result` messages, each with its own msg_len.
int count_messages(int fd, int result, const mmsghdr* messages, stats::Direction direction, int flags);

}  // namespace qpsock::sockets
