// Exported: glibc's _FORTIFY_SOURCE variants. glibc's own versions call its
// internal read/recv/poll directly, which would bypass qpsock, so each one here
// makes the same buffer check and then takes the ordinary path.
#include "libc/next_symbols.h"
#include "readiness/readiness_calls.h"
#include "sockets/data_transfer.h"

extern "C" {

ssize_t __read_chk(int fd, void* buffer, size_t count, size_t buffer_size) {
  if (count > buffer_size) __chk_fail();
  return qpsock::sockets::read(fd, buffer, count);
}
ssize_t __recv_chk(int fd, void* buffer, size_t count, size_t buffer_size, int flags) {
  if (count > buffer_size) __chk_fail();
  return qpsock::sockets::recv(fd, buffer, count, flags);
}
ssize_t __recvfrom_chk(int fd, void* buffer, size_t count, size_t buffer_size, int flags,
                       sockaddr* address, socklen_t* address_length) {
  if (count > buffer_size) __chk_fail();
  return qpsock::sockets::recvfrom(fd, buffer, count, flags, address, address_length);
}
int __poll_chk(pollfd* fds, nfds_t count, int timeout, size_t fds_size) {
  if (fds_size / sizeof(pollfd) < count) __chk_fail();
  return qpsock::readiness::poll(fds, count, timeout);
}
int __ppoll_chk(pollfd* fds, nfds_t count, const timespec* timeout, const sigset_t* mask,
                size_t fds_size) {
  if (fds_size / sizeof(pollfd) < count) __chk_fail();
  return qpsock::readiness::ppoll(fds, count, timeout, mask);
}

}  // extern "C"
