// Whether this process has set up an io_uring. io_uring reads and writes a
// socket without any call qpsock sees, so a connection it might touch must
// never switch to a stream: such a process keeps its connections on TCP.
//
// What is detected: an io_uring whose rings are mapped (every ring made with
// io_uring_setup(2) before Linux 6.5's IORING_SETUP_NO_MMAP), seen as
// "anon_inode:[io_uring]" in /proc/self/maps, at the time of each upgrade.
// Not detected: a ring set up after a connection switched (qpsock(7),
// LIMITATIONS).
#pragma once

namespace qpsock::upgrade {

class Connection;

// True once the process is seen with an io_uring; sticky. Reads
// /proc/self/maps at most every 100 ms (an upgrade burst pays it once).
bool process_uses_io_uring();

// True, with `connection` (at `fd`) declined and its log line, if the
// process uses io_uring; asked when an upgrade is about to begin.
bool declined_for_io_uring(int fd, Connection& connection);

}  // namespace qpsock::upgrade
