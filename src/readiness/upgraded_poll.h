// poll/ppoll/select/pselect over sets that hold upgraded sockets. A switched
// direction's readiness comes from its stream (data or credit in shared
// memory, which the kernel cannot see); the rest from the kernel. The wait
// sleeps in the kernel on the original fds plus each stream's transport wait
// handle, so nothing spins while idle.
//
// A socket still waiting for its upgrade is the kernel's: the peer's switch
// writes the binding token into TCP, which wakes a reader, and the reader's
// next call finds the stream. An epoll fd whose set holds upgraded sockets is
// readable when one of them is (its streams are armed while we sleep).
// In a forked child, a socket whose stream its parent upgraded is reported
// failed (POLLERR | POLLHUP) at once, as epoll reports it: its calls fail with
// ECONNRESET, and its kernel socket would never wake a wait.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/select.h>
#include <time.h>

namespace qpsock::readiness {

// True if the set had upgraded sockets and `result` holds poll's result
// (errno set when -1); false: the caller passes the call to the kernel.
bool poll_upgraded(pollfd* fds, nfds_t count, const timespec* timeout, const sigset_t* mask,
                   int& result);
// The same for select (timeout updated as Linux does).
bool select_upgraded(int count, fd_set* read_set, fd_set* write_set, fd_set* error_set,
                     const timespec* timeout, const sigset_t* mask, int& result);

}  // namespace qpsock::readiness
