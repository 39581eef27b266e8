// Exported: every call that moves bytes through a socket.
#include "sockets/data_transfer.h"

extern "C" {

ssize_t read(int fd, void* buffer, size_t count) {
  return qpsock::sockets::read(fd, buffer, count);
}
ssize_t readv(int fd, const iovec* vector, int count) {
  return qpsock::sockets::readv(fd, vector, count);
}
ssize_t write(int fd, const void* buffer, size_t count) {
  return qpsock::sockets::write(fd, buffer, count);
}
ssize_t writev(int fd, const iovec* vector, int count) {
  return qpsock::sockets::writev(fd, vector, count);
}
ssize_t send(int fd, const void* buffer, size_t count, int flags) {
  return qpsock::sockets::send(fd, buffer, count, flags);
}
ssize_t sendto(int fd, const void* buffer, size_t count, int flags, const sockaddr* address,
               socklen_t length) {
  return qpsock::sockets::sendto(fd, buffer, count, flags, address, length);
}
ssize_t sendmsg(int fd, const msghdr* message, int flags) {
  return qpsock::sockets::sendmsg(fd, message, flags);
}
int sendmmsg(int fd, mmsghdr* messages, unsigned int count, int flags) {
  return qpsock::sockets::sendmmsg(fd, messages, count, flags);
}
ssize_t recv(int fd, void* buffer, size_t count, int flags) {
  return qpsock::sockets::recv(fd, buffer, count, flags);
}
ssize_t recvfrom(int fd, void* buffer, size_t count, int flags, sockaddr* address,
                 socklen_t* length) {
  return qpsock::sockets::recvfrom(fd, buffer, count, flags, address, length);
}
ssize_t recvmsg(int fd, msghdr* message, int flags) {
  return qpsock::sockets::recvmsg(fd, message, flags);
}
int recvmmsg(int fd, mmsghdr* messages, unsigned int count, int flags, timespec* timeout) {
  return qpsock::sockets::recvmmsg(fd, messages, count, flags, timeout);
}
ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) noexcept {
  return qpsock::sockets::sendfile(out_fd, in_fd, offset, count);
}
ssize_t sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count) noexcept {
  return qpsock::sockets::sendfile64(out_fd, in_fd, offset, count);
}
ssize_t splice(int in_fd, loff_t* in_offset, int out_fd, loff_t* out_offset, size_t count,
               unsigned int flags) {
  return qpsock::sockets::splice(in_fd, in_offset, out_fd, out_offset, count, flags);
}

}  // extern "C"
