// Entry points for the calls that wait for readiness. Upgraded streams (a later
// stage) will report here exactly as kernel TCP sockets do; every other fd is
// the kernel's.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>

namespace qpsock::readiness {

int poll(pollfd* fds, nfds_t count, int timeout_milliseconds);
int ppoll(pollfd* fds, nfds_t count, const timespec* timeout, const sigset_t* mask);
int select(int count, fd_set* read_set, fd_set* write_set, fd_set* error_set, timeval* timeout);
int pselect(int count, fd_set* read_set, fd_set* write_set, fd_set* error_set,
            const timespec* timeout, const sigset_t* mask);
int epoll_create(int size);
int epoll_create1(int flags);
int epoll_ctl(int epoll_fd, int operation, int fd, epoll_event* event);
int epoll_wait(int epoll_fd, epoll_event* events, int capacity, int timeout_milliseconds);
int epoll_pwait(int epoll_fd, epoll_event* events, int capacity, int timeout_milliseconds,
                const sigset_t* mask);
int epoll_pwait2(int epoll_fd, epoll_event* events, int capacity, const timespec* timeout,
                 const sigset_t* mask);

}  // namespace qpsock::readiness
