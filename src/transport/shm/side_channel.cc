#include "transport/shm/side_channel.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/own_descriptor.h"
#include "libc/next_symbols.h"

namespace qpsock::transport::shm {
namespace {

constexpr size_t kMostFds = 4;

// Waits for `events` on `socket` until the deadline; 0 or -errno.
int wait_for(int socket, short events, Deadline deadline) {
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return -ETIMEDOUT;
    pollfd watched{socket, events, 0};
    const int ready = next::poll(&watched, 1, static_cast<int>(left.count()));
    if (ready > 0) return 0;
    if (ready < 0 && errno != EINTR) return -errno;
  }
}

bool retry_later(int error) { return error == EAGAIN || error == EWOULDBLOCK || error == EINTR; }

// Takes the fds out of a received control message into `fds`; their count.
// One qpsock may not keep (its descriptor limit) is closed, not counted,
// and sets `limited`.
size_t take_fds(msghdr& message, std::span<UniqueFd> fds, bool& overflow, bool& limited) {
  size_t count = 0;
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const size_t carried = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t index = 0; index < carried; ++index) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(header) + index * sizeof(int), sizeof(int));
      if (count < fds.size()) {
        const int kept = keep_own_descriptor(fd);
        if (kept >= 0)
          fds[count++].reset(kept);
        else
          limited = true;
      } else {
        close_descriptor(fd);
        overflow = true;
      }
    }
  }
  return count;
}

}  // namespace

int send_message(int socket, const void* data, size_t length, std::span<const int> fds,
                 Deadline deadline) {
  if (fds.size() > kMostFds) return -EINVAL;
  alignas(cmsghdr) char control[CMSG_SPACE(kMostFds * sizeof(int))] = {};
  size_t sent = 0;
  while (sent < length) {
    iovec piece{const_cast<char*>(static_cast<const char*>(data)) + sent, length - sent};
    msghdr message{};
    message.msg_iov = &piece;
    message.msg_iovlen = 1;
    if (sent == 0 && !fds.empty()) {
      message.msg_control = control;
      message.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
      cmsghdr* header = CMSG_FIRSTHDR(&message);
      header->cmsg_level = SOL_SOCKET;
      header->cmsg_type = SCM_RIGHTS;
      header->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
      std::memcpy(CMSG_DATA(header), fds.data(), fds.size() * sizeof(int));
    }
    const ssize_t done = next::sendmsg(socket, &message, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (done > 0) {
      sent += static_cast<size_t>(done);
      continue;
    }
    if (done < 0 && !retry_later(errno)) return -errno;
    if (int error = wait_for(socket, POLLOUT, deadline); error < 0) return error;
  }
  return 0;
}

int receive_message(int socket, void* data, size_t length, std::span<UniqueFd> fds,
                    size_t& fds_received, Deadline deadline) {
  alignas(cmsghdr) char control[CMSG_SPACE(kMostFds * sizeof(int))];
  size_t received = 0;
  fds_received = 0;
  bool overflow = false;
  // The kernel truncates the fds it cannot install (MSG_CTRUNC) for want of
  // descriptors; our buffer holds more than the protocol ever sends.
  bool limited = false;
  while (received < length) {
    iovec piece{static_cast<char*>(data) + received, length - received};
    msghdr message{};
    message.msg_iov = &piece;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    const ssize_t done = next::recvmsg(socket, &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (done > 0) {
      fds_received +=
          take_fds(message, fds.subspan(std::min(fds_received, fds.size())), overflow, limited);
      if ((message.msg_flags & MSG_CTRUNC) != 0) limited = true;
      received += static_cast<size_t>(done);
      continue;
    }
    if (done == 0) return -ECONNRESET;
    if (!retry_later(errno)) return -errno;
    if (int error = wait_for(socket, POLLIN, deadline); error < 0) return error;
  }
  if (overflow) return -EPROTO;
  return limited ? -EMFILE : 0;
}

}  // namespace qpsock::transport::shm
