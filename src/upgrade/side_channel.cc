#include "upgrade/side_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/own_descriptor.h"
#include "libc/next_symbols.h"

namespace qpsock::upgrade {
namespace {

socklen_t abstract_address(uint64_t inode, sockaddr_un& address) {
  address = {};
  address.sun_family = AF_UNIX;
  // sun_path[0] stays '\0': an abstract name, gone when the socket closes.
  const int length = snprintf(address.sun_path + 1, sizeof(address.sun_path) - 1, "qpsock/1/%llu",
                              static_cast<unsigned long long>(inode));
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + length);
}

int remaining_milliseconds(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(left.count()) + 1;
}

int wait_for(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd entry{fd, events, 0};
    const int ready = next::poll(&entry, 1, remaining_milliseconds(deadline));
    if (ready > 0) return 0;
    if (ready == 0) return -ETIMEDOUT;
    if (errno != EINTR) return -errno;
  }
}

}  // namespace

int listen_for_upgrade(uint64_t client_socket_inode) {
  const int fd =
      keep_own_descriptor(next::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd < 0) return -errno;
  sockaddr_un address;
  const socklen_t length = abstract_address(client_socket_inode, address);
  if (next::bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      next::listen(fd, 4) != 0) {
    const int error = -errno;
    close_descriptor(fd);
    return error;
  }
  return fd;
}

int connect_for_upgrade(uint64_t client_socket_inode) {
  const int fd = keep_own_descriptor(next::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd < 0) return -errno;
  sockaddr_un address;
  const socklen_t length = abstract_address(client_socket_inode, address);
  if (next::connect(fd, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    const int error = -errno;
    close_descriptor(fd);
    return error;
  }
  return fd;
}

int send_exactly(int fd, const void* data, size_t length, Deadline deadline) {
  auto* bytes = static_cast<const char*>(data);
  while (length > 0) {
    const ssize_t sent = next::send(fd, bytes, length, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      bytes += sent;
      length -= static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && errno != EAGAIN) return errno == EPIPE ? -ECONNRESET : -errno;
    if (int waited = wait_for(fd, POLLOUT, deadline); waited < 0) return waited;
  }
  return 0;
}

int receive_exactly(int fd, void* data, size_t length, Deadline deadline) {
  auto* bytes = static_cast<char*>(data);
  while (length > 0) {
    const ssize_t got = next::recv(fd, bytes, length, MSG_DONTWAIT);
    if (got > 0) {
      bytes += got;
      length -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return -ECONNRESET;
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return -errno;
    if (int waited = wait_for(fd, POLLIN, deadline); waited < 0) return waited;
  }
  return 0;
}

}  // namespace qpsock::upgrade
