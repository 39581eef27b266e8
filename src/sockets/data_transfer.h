// Entry points for every call that moves bytes through a socket. Once a stream
// is upgraded (a later stage), each of these routes it through the stream
// engine; for every other fd they are the kernel's calls, unchanged.
#pragma once

#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

namespace qpsock::sockets {

ssize_t read(int fd, void* buffer, size_t count);
ssize_t readv(int fd, const iovec* vector, int count);
ssize_t write(int fd, const void* buffer, size_t count);
ssize_t writev(int fd, const iovec* vector, int count);
ssize_t send(int fd, const void* buffer, size_t count, int flags);
ssize_t sendto(int fd, const void* buffer, size_t count, int flags, const sockaddr* address,
               socklen_t length);
ssize_t sendmsg(int fd, const msghdr* message, int flags);
int sendmmsg(int fd, mmsghdr* messages, unsigned int count, int flags);
ssize_t recv(int fd, void* buffer, size_t count, int flags);
ssize_t recvfrom(int fd, void* buffer, size_t count, int flags, sockaddr* address,
                 socklen_t* length);
ssize_t recvmsg(int fd, msghdr* message, int flags);
int recvmmsg(int fd, mmsghdr* messages, unsigned int count, int flags, timespec* timeout);
ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count);
ssize_t sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count);
ssize_t splice(int in_fd, loff_t* in_offset, int out_fd, loff_t* out_offset, size_t count,
               unsigned int flags);

}  // namespace qpsock::sockets
