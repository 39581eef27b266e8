// epoll over sockets that may be upgraded: which epoll fds qpsock keeps an
// EpollSet for, and the calls that go through them. A process whose epoll
// sets never held such a socket pays one load per call.
#pragma once

#include <signal.h>
#include <sys/epoll.h>
#include <time.h>

#include <memory>

#include "readiness/epoll_set.h"
#include "stream/function_ref.h"

namespace qpsock::readiness {

// epoll_create/epoll_create1 made epoll_fd.
void epoll_created(int epoll_fd);
int epoll_control(int epoll_fd, int operation, int fd, epoll_event* event);
// epoll_wait and its kin: `kernel_wait` (the application's call, passed on)
// while no epoll set of the process holds anything of qpsock's, else the
// set's own wait. Any registration of ours in what the kernel returned (a
// thread converted a socket while this one slept) is translated.
int epoll_wait_through(int epoll_fd, epoll_event* events, int capacity, const timespec* timeout,
                       const sigset_t* mask, stream::FunctionRef<int()> kernel_wait);
// The application closes fd, or dup2 replaces it: its registrations, and its
// EpollSet if it is an epoll fd, go (called before the kernel's close).
void fd_closing(int fd);
// The highest epoll fd with a set of ours (-1: none).
int highest_epoll_set_fd();
// The EpollSet of an epoll fd that holds sockets qpsock watches, or null:
// then epoll_wait on it, and a wait on its fd, are the kernel's.
std::shared_ptr<EpollSet> active_epoll_set(int fd);

}  // namespace qpsock::readiness
