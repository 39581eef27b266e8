// Entry points for the calls that create, connect, duplicate and close sockets.
// Every fd stays a real kernel socket: these call the kernel first and only
// then update qpsock's own records, leaving errno as the kernel set it.
#pragma once

#include <sys/socket.h>

namespace qpsock::sockets {

int socket(int domain, int type, int protocol);
int socketpair(int domain, int type, int protocol, int fds[2]);
int bind(int fd, const sockaddr* address, socklen_t length);
int listen(int fd, int backlog);
int accept(int fd, sockaddr* address, socklen_t* length);
int accept4(int fd, sockaddr* address, socklen_t* length, int flags);
int connect(int fd, const sockaddr* address, socklen_t length);
int close(int fd);
// As close for each fd of the range that qpsock knows of, then the kernel's.
int close_range(unsigned first, unsigned last, int flags);
void closefrom(int lowest);
int shutdown(int fd, int how);

int dup(int fd);
int dup2(int old_fd, int new_fd);
int dup3(int old_fd, int new_fd, int flags);
// fcntl's third argument, whatever its type, travels as a long.
int fcntl(int fd, int command, long argument);
int ioctl(int fd, unsigned long request, void* argument);

int getsockopt(int fd, int level, int name, void* value, socklen_t* length);
int setsockopt(int fd, int level, int name, const void* value, socklen_t length);
int getsockname(int fd, sockaddr* address, socklen_t* length);
int getpeername(int fd, sockaddr* address, socklen_t* length);

// True for the sockets qpsock tracks: AF_INET/AF_INET6 byte streams over TCP.
bool is_trackable_socket(int domain, int type, int protocol);

}  // namespace qpsock::sockets
