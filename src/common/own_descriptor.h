// Descriptors qpsock opens for itself, kept out of the application's range.
//
// The kernel gives every new descriptor the lowest free number below the
// soft RLIMIT_NOFILE, and fails with EMFILE when there is none. A descriptor
// qpsock keeps below that limit takes a number the application could have
// had: a program that works plainly near its limit would fail under qpsock.
// So every descriptor qpsock keeps beyond one call goes through
// keep_own_descriptor() right after it is opened (or received):
//
// - Where the hard limit is above the soft one (the usual case: a soft 1024
//   under a hard limit of thousands), the descriptor is renumbered to at or
//   above the soft limit, which is raised for the length of that one
//   F_DUPFD and put back at once. The application then has every number
//   below its limit, as without qpsock, and sees its own limit unchanged.
// - Where there is no room above (hard = soft, or a soft limit so large,
//   at least 65536, that raising it would grow the kernel's descriptor
//   table), qpsock's descriptors count against the application's. qpsock
//   then keeps one only while the process holds under half its limit (the
//   number the kernel chose says how many are in use below it), and only
//   under a limit of at least 4096 (what a JVM raises its soft limit to
//   under the kernel's default hard one); otherwise it refuses.
//
// A refused descriptor is closed; the caller fails its setup with EMFILE and
// the connection stays on TCP. The first refusal logs one line.
//
// What is left: while the limit is raised (three system calls) another
// thread's open at the very limit succeeds instead of failing with EMFILE,
// and a setrlimit of the application's in that window is undone. Descriptors
// held only within one call (a netlink query, a route probe) are not moved.
#pragma once

#include <cerrno>

namespace qpsock {

// `fd` is a descriptor qpsock just opened, or -1 from a failed open (returned
// as it is, errno untouched). Returns the descriptor to keep (`fd` itself or
// its new number, with the same close-on-exec flag), or -1 with errno EMFILE
// after closing it. Not for signal handlers; safe in threads and across fork.
int keep_own_descriptor(int fd);

// Whether qpsock refused one of its descriptors (or the kernel refused it
// one, note_descriptor_limit) within the last second. An upgrade then does
// not begin: it would take several and fail halfway, making its peer fail
// too. Lock-free.
bool own_descriptors_recently_refused();
// A setup met EMFILE or ENFILE from the kernel itself.
void note_descriptor_limit();
// Whether a -errno says a descriptor limit (the process's or the system's).
inline bool is_descriptor_limit(int error) { return error == -EMFILE || error == -ENFILE; }
// True once a process: the caller logs the process's one warning about a
// descriptor limit (a refusal here logs it too, and counts).
bool take_descriptor_limit_warning();

// The same for a descriptor a library holds in a field of its own (an
// rdma_cm event channel's, a completion channel's): renumbers `fd` in place
// and returns 0, or returns -EMFILE with `fd` unchanged and still open, for
// the library to close.
int place_own_descriptor(int& fd);

// The lowest number in [from, last] that holds a descriptor qpsock kept, or
// -1. The application's close_range and closefrom close around them:
// without qpsock those numbers would not be open, and closing them would
// take qpsock's loop, links and wakeups away from under the connections
// that use them. A kept number is forgotten when it is closed through
// close_descriptor (every close of qpsock's, and the application's close,
// dup2 and dup3 over it), and also when its file is no longer the one kept
// (a close behind qpsock's back, where the files differ in inode: anonymous
// ones such as eventfds all share one).
int next_own_descriptor(int from, int last);

// Closes `fd` (ours or the application's), forgetting it first if qpsock
// kept it: 0 or -1 with errno, as close(2).
int close_descriptor(int fd);
// `fd` no longer holds what qpsock kept there (another file was dup2'ed over it).
void forget_own_descriptor(int fd);

}  // namespace qpsock
