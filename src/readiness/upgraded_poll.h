// poll/ppoll/select/pselect over sets that hold upgraded sockets. A switched
// direction's readiness comes from its stream (data or credit in shared
// memory, which the kernel cannot see); the rest from the kernel. The wait
// sleeps in the kernel on the original fds plus each stream's transport wait
// handle, so nothing spins while idle.
//
// A socket that is still waiting for its upgrade when the application first
// waits on it stays on TCP for good (readiness before the upgrade would have
// to be promised for a transport that does not exist yet).
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

// epoll over upgraded sockets is not done yet: a socket registered in an
// epoll set before its upgrade stays on TCP; one registered after it gets a
// warning (its readiness is the kernel's, which may miss stream data).
void decline_upgrade_for_epoll(int fd);

}  // namespace qpsock::readiness
