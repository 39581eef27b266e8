#include "sockets/data_transfer.h"

#include <fcntl.h>

#include "libc/next_symbols.h"

namespace qpsock::sockets {

ssize_t read(int fd, void* buffer, size_t count) { return next::read(fd, buffer, count); }

ssize_t readv(int fd, const iovec* vector, int count) { return next::readv(fd, vector, count); }

ssize_t write(int fd, const void* buffer, size_t count) {
  return next::write(fd, buffer, count);
}

ssize_t writev(int fd, const iovec* vector, int count) {
  return next::writev(fd, vector, count);
}

ssize_t send(int fd, const void* buffer, size_t count, int flags) {
  return next::send(fd, buffer, count, flags);
}

ssize_t sendto(int fd, const void* buffer, size_t count, int flags, const sockaddr* address,
               socklen_t length) {
  return next::sendto(fd, buffer, count, flags, address, length);
}

ssize_t sendmsg(int fd, const msghdr* message, int flags) {
  return next::sendmsg(fd, message, flags);
}

int sendmmsg(int fd, mmsghdr* messages, unsigned int count, int flags) {
  return next::sendmmsg(fd, messages, count, flags);
}

ssize_t recv(int fd, void* buffer, size_t count, int flags) {
  return next::recv(fd, buffer, count, flags);
}

ssize_t recvfrom(int fd, void* buffer, size_t count, int flags, sockaddr* address,
                 socklen_t* length) {
  return next::recvfrom(fd, buffer, count, flags, address, length);
}

ssize_t recvmsg(int fd, msghdr* message, int flags) {
  return next::recvmsg(fd, message, flags);
}

int recvmmsg(int fd, mmsghdr* messages, unsigned int count, int flags, timespec* timeout) {
  return next::recvmmsg(fd, messages, count, flags, timeout);
}

ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) {
  return next::sendfile(out_fd, in_fd, offset, count);
}

ssize_t sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count) {
  return next::sendfile64(out_fd, in_fd, offset, count);
}

ssize_t splice(int in_fd, loff_t* in_offset, int out_fd, loff_t* out_offset, size_t count,
               unsigned int flags) {
  return next::splice(in_fd, in_offset, out_fd, out_offset, count, flags);
}

}  // namespace qpsock::sockets
