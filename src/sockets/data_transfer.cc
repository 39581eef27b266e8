#include "sockets/data_transfer.h"

#include <fcntl.h>

#include "libc/next_symbols.h"
#include "upgrade/socket_upgrade.h"

namespace qpsock::sockets {
namespace {

// Once a socket has a Connection (it may switch to a stream, or has), every
// way of moving bytes through it goes through the Connection.
ssize_t receive_through(upgrade::Connection& connection, int fd, void* buffer, size_t count,
                        int flags) {
  iovec piece{buffer, count};
  return connection.receive(fd, {&piece, 1}, flags);
}

ssize_t send_through(upgrade::Connection& connection, int fd, const void* buffer, size_t count,
                     int flags) {
  iovec piece{const_cast<void*>(buffer), count};
  return connection.send(fd, {&piece, 1}, flags);
}

std::span<const iovec> iovecs(const iovec* vector, int count) {
  return {vector, count > 0 ? static_cast<size_t>(count) : 0};
}

}  // namespace

ssize_t read(int fd, void* buffer, size_t count) {
  if (auto connection = upgrade::connection_for_io(fd))
    return receive_through(*connection, fd, buffer, count, 0);
  return next::read(fd, buffer, count);
}

ssize_t readv(int fd, const iovec* vector, int count) {
  if (auto connection = upgrade::connection_for_io(fd))
    return connection->receive(fd, iovecs(vector, count), 0);
  return next::readv(fd, vector, count);
}

ssize_t write(int fd, const void* buffer, size_t count) {
  if (auto connection = upgrade::connection_for_io(fd))
    return send_through(*connection, fd, buffer, count, 0);
  return next::write(fd, buffer, count);
}

ssize_t writev(int fd, const iovec* vector, int count) {
  if (auto connection = upgrade::connection_for_io(fd))
    return connection->send(fd, iovecs(vector, count), 0);
  return next::writev(fd, vector, count);
}

ssize_t send(int fd, const void* buffer, size_t count, int flags) {
  if (auto connection = upgrade::connection_for_io(fd))
    return send_through(*connection, fd, buffer, count, flags);
  return next::send(fd, buffer, count, flags);
}

ssize_t sendto(int fd, const void* buffer, size_t count, int flags, const sockaddr* address,
               socklen_t length) {
  // A connected TCP socket ignores the address, as the kernel does.
  if (auto connection = upgrade::connection_for_io(fd))
    return send_through(*connection, fd, buffer, count, flags);
  return next::sendto(fd, buffer, count, flags, address, length);
}

ssize_t sendmsg(int fd, const msghdr* message, int flags) {
  if (auto connection = upgrade::connection_for_io(fd))
    return connection->send(fd, {message->msg_iov, message->msg_iovlen}, flags);
  return next::sendmsg(fd, message, flags);
}

int sendmmsg(int fd, mmsghdr* messages, unsigned int count, int flags) {
  return next::sendmmsg(fd, messages, count, flags);
}

ssize_t recv(int fd, void* buffer, size_t count, int flags) {
  if (auto connection = upgrade::connection_for_io(fd))
    return receive_through(*connection, fd, buffer, count, flags);
  return next::recv(fd, buffer, count, flags);
}

ssize_t recvfrom(int fd, void* buffer, size_t count, int flags, sockaddr* address,
                 socklen_t* length) {
  if (auto connection = upgrade::connection_for_io(fd)) {
    // TCP leaves the address alone (a connected stream has no sender address).
    if (length != nullptr) *length = 0;
    return receive_through(*connection, fd, buffer, count, flags);
  }
  return next::recvfrom(fd, buffer, count, flags, address, length);
}

ssize_t recvmsg(int fd, msghdr* message, int flags) {
  if (auto connection = upgrade::connection_for_io(fd)) {
    const ssize_t got = connection->receive(fd, {message->msg_iov, message->msg_iovlen}, flags);
    if (got >= 0) {
      message->msg_namelen = 0;
      message->msg_controllen = 0;
      message->msg_flags = 0;
    }
    return got;
  }
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
