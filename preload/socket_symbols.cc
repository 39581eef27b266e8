// Exported: socket creation, connection set-up, options and names.
#include <cstdarg>

#include "sockets/socket_lifecycle.h"

extern "C" {

int socket(int domain, int type, int protocol) noexcept {
  return qpsock::sockets::socket(domain, type, protocol);
}
int socketpair(int domain, int type, int protocol, int fds[2]) noexcept {
  return qpsock::sockets::socketpair(domain, type, protocol, fds);
}
int bind(int fd, const sockaddr* address, socklen_t length) noexcept {
  return qpsock::sockets::bind(fd, address, length);
}
int listen(int fd, int backlog) noexcept { return qpsock::sockets::listen(fd, backlog); }
int accept(int fd, sockaddr* address, socklen_t* length) {
  return qpsock::sockets::accept(fd, address, length);
}
int accept4(int fd, sockaddr* address, socklen_t* length, int flags) {
  return qpsock::sockets::accept4(fd, address, length, flags);
}
int connect(int fd, const sockaddr* address, socklen_t length) {
  return qpsock::sockets::connect(fd, address, length);
}
int close(int fd) { return qpsock::sockets::close(fd); }
int close_range(unsigned first, unsigned last, int flags) noexcept {
  return qpsock::sockets::close_range(first, last, flags);
}
void closefrom(int lowest) noexcept { qpsock::sockets::closefrom(lowest); }
int shutdown(int fd, int how) noexcept { return qpsock::sockets::shutdown(fd, how); }

int dup(int fd) noexcept { return qpsock::sockets::dup(fd); }
int dup2(int old_fd, int new_fd) noexcept { return qpsock::sockets::dup2(old_fd, new_fd); }
int dup3(int old_fd, int new_fd, int flags) noexcept {
  return qpsock::sockets::dup3(old_fd, new_fd, flags);
}

int fcntl(int fd, int command, ...) {
  va_list arguments;
  va_start(arguments, command);
  long argument = va_arg(arguments, long);
  va_end(arguments);
  return qpsock::sockets::fcntl(fd, command, argument);
}
int fcntl64(int fd, int command, ...) {
  va_list arguments;
  va_start(arguments, command);
  long argument = va_arg(arguments, long);
  va_end(arguments);
  return qpsock::sockets::fcntl(fd, command, argument);
}
int ioctl(int fd, unsigned long request, ...) noexcept {
  va_list arguments;
  va_start(arguments, request);
  void* argument = va_arg(arguments, void*);
  va_end(arguments);
  return qpsock::sockets::ioctl(fd, request, argument);
}

int getsockopt(int fd, int level, int name, void* value, socklen_t* length) noexcept {
  return qpsock::sockets::getsockopt(fd, level, name, value, length);
}
int setsockopt(int fd, int level, int name, const void* value, socklen_t length) noexcept {
  return qpsock::sockets::setsockopt(fd, level, name, value, length);
}
int getsockname(int fd, sockaddr* address, socklen_t* length) noexcept {
  return qpsock::sockets::getsockname(fd, address, length);
}
int getpeername(int fd, sockaddr* address, socklen_t* length) noexcept {
  return qpsock::sockets::getpeername(fd, address, length);
}

}  // extern "C"
