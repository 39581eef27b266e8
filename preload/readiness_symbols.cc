// Exported: the calls that wait for readiness.
#include "readiness/readiness_calls.h"

extern "C" {

int poll(pollfd* fds, nfds_t count, int timeout_milliseconds) {
  return qpsock::readiness::poll(fds, count, timeout_milliseconds);
}
int ppoll(pollfd* fds, nfds_t count, const timespec* timeout, const sigset_t* mask) {
  return qpsock::readiness::ppoll(fds, count, timeout, mask);
}
int select(int count, fd_set* read_set, fd_set* write_set, fd_set* error_set, timeval* timeout) {
  return qpsock::readiness::select(count, read_set, write_set, error_set, timeout);
}
int pselect(int count, fd_set* read_set, fd_set* write_set, fd_set* error_set,
            const timespec* timeout, const sigset_t* mask) {
  return qpsock::readiness::pselect(count, read_set, write_set, error_set, timeout, mask);
}
int epoll_create(int size) noexcept { return qpsock::readiness::epoll_create(size); }
int epoll_create1(int flags) noexcept { return qpsock::readiness::epoll_create1(flags); }
int epoll_ctl(int epoll_fd, int operation, int fd, epoll_event* event) noexcept {
  return qpsock::readiness::epoll_ctl(epoll_fd, operation, fd, event);
}
int epoll_wait(int epoll_fd, epoll_event* events, int capacity, int timeout_milliseconds) {
  return qpsock::readiness::epoll_wait(epoll_fd, events, capacity, timeout_milliseconds);
}
int epoll_pwait(int epoll_fd, epoll_event* events, int capacity, int timeout_milliseconds,
                const sigset_t* mask) {
  return qpsock::readiness::epoll_pwait(epoll_fd, events, capacity, timeout_milliseconds, mask);
}
int epoll_pwait2(int epoll_fd, epoll_event* events, int capacity, const timespec* timeout,
                 const sigset_t* mask) {
  return qpsock::readiness::epoll_pwait2(epoll_fd, events, capacity, timeout, mask);
}

}  // extern "C"
