#include "readiness/readiness_calls.h"

#include "libc/next_symbols.h"
#include "readiness/upgraded_epoll.h"
#include "readiness/upgraded_poll.h"
#include "sockets/fd_table.h"

namespace qpsock::readiness {
namespace {

timespec from_milliseconds(int milliseconds) {
  return {milliseconds / 1000, (milliseconds % 1000) * 1000000L};
}

void created_epoll_fd(int fd) {
  sockets::FdTable::process_table().forget(fd);
  epoll_created(fd);
}

}  // namespace

int poll(pollfd* fds, nfds_t count, int timeout_milliseconds) {
  const timespec timeout = from_milliseconds(timeout_milliseconds);
  int result = 0;
  if (poll_upgraded(fds, count, timeout_milliseconds < 0 ? nullptr : &timeout, nullptr, result))
    return result;
  return next::poll(fds, count, timeout_milliseconds);
}

int ppoll(pollfd* fds, nfds_t count, const timespec* timeout, const sigset_t* mask) {
  int result = 0;
  if (poll_upgraded(fds, count, timeout, mask, result)) return result;
  return next::ppoll(fds, count, timeout, mask);
}

int select(int count, fd_set* read_set, fd_set* write_set, fd_set* error_set,
           timeval* timeout) {
  timespec converted{};
  if (timeout != nullptr) converted = {timeout->tv_sec, timeout->tv_usec * 1000L};
  int result = 0;
  if (select_upgraded(count, read_set, write_set, error_set, timeout ? &converted : nullptr, nullptr,
                      result))
    return result;
  return next::select(count, read_set, write_set, error_set, timeout);
}

int pselect(int count, fd_set* read_set, fd_set* write_set, fd_set* error_set,
            const timespec* timeout, const sigset_t* mask) {
  int result = 0;
  if (select_upgraded(count, read_set, write_set, error_set, timeout, mask, result)) return result;
  return next::pselect(count, read_set, write_set, error_set, timeout, mask);
}

int epoll_create(int size) {
  int fd = next::epoll_create(size);
  if (fd >= 0) created_epoll_fd(fd);
  return fd;
}

int epoll_create1(int flags) {
  int fd = next::epoll_create1(flags);
  if (fd >= 0) created_epoll_fd(fd);
  return fd;
}

int epoll_ctl(int epoll_fd, int operation, int fd, epoll_event* event) {
  return epoll_control(epoll_fd, operation, fd, event);
}

int epoll_wait(int epoll_fd, epoll_event* events, int capacity, int timeout_milliseconds) {
  const timespec timeout = from_milliseconds(timeout_milliseconds);
  return epoll_wait_through(epoll_fd, events, capacity,
                            timeout_milliseconds < 0 ? nullptr : &timeout, nullptr, [&] {
                              return next::epoll_wait(epoll_fd, events, capacity, timeout_milliseconds);
                            });
}

int epoll_pwait(int epoll_fd, epoll_event* events, int capacity, int timeout_milliseconds,
                const sigset_t* mask) {
  const timespec timeout = from_milliseconds(timeout_milliseconds);
  return epoll_wait_through(epoll_fd, events, capacity,
                            timeout_milliseconds < 0 ? nullptr : &timeout, mask, [&] {
                              return next::epoll_pwait(epoll_fd, events, capacity,
                                                       timeout_milliseconds, mask);
                            });
}

int epoll_pwait2(int epoll_fd, epoll_event* events, int capacity, const timespec* timeout,
                 const sigset_t* mask) {
  return epoll_wait_through(epoll_fd, events, capacity, timeout, mask, [&] {
    return next::epoll_pwait2(epoll_fd, events, capacity, timeout, mask);
  });
}

}  // namespace qpsock::readiness
