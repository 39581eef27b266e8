#include "readiness/upgraded_poll.h"

#include <cerrno>
#include <chrono>
#include <memory>
#include <vector>

#include "common/log.h"
#include "libc/next_symbols.h"
#include "upgrade/connection_registry.h"

namespace qpsock::readiness {
namespace {

using Clock = std::chrono::steady_clock;

struct Watched {
  nfds_t index;  // in the application's array
  std::shared_ptr<upgrade::Connection> connection;
};

// The upgraded sockets of the set; declines the ones not yet upgraded.
std::vector<Watched> upgraded_entries(const pollfd* fds, nfds_t count) {
  std::vector<Watched> watched;
  for (nfds_t index = 0; index < count; ++index) {
    if (fds[index].fd < 0) continue;
    std::shared_ptr<upgrade::Connection> connection = upgrade::find_connection(fds[index].fd);
    if (connection == nullptr) continue;
    if (connection->phase() == upgrade::UpgradePhase::offered) {
      connection->decline("polled before the upgrade");
      QPSOCK_LOG(info, "fd %d: waited on before its upgrade; it stays on TCP", fds[index].fd);
    }
    if (connection->stream() != nullptr) watched.push_back({index, std::move(connection)});
  }
  return watched;
}

// The application's revents for an upgraded socket: switched directions from
// the stream, the others from what the kernel said of the TCP socket.
short merged_events(const Watched& entry, short wanted, short kernel) {
  upgrade::Connection& connection = *entry.connection;
  const short stream_events = connection.stream()->readiness();
  short events = 0;
  const short read_bits = POLLIN | POLLRDNORM | POLLRDHUP;
  const short write_bits = POLLOUT | POLLWRNORM;
  events |= (connection.receiving_switched() ? stream_events : kernel) & read_bits;
  events |= (connection.sending_switched() ? stream_events : kernel) & write_bits;
  if (connection.switched()) {
    events |= stream_events & (POLLHUP | POLLERR);
  } else {
    events |= kernel & (POLLHUP | POLLERR);
  }
  return static_cast<short>(events & (wanted | POLLHUP | POLLERR));
}

int remaining_timeout(const std::optional<Clock::time_point>& deadline, timespec& storage,
                      const timespec*& timeout) {
  if (!deadline) {
    timeout = nullptr;
    return 0;
  }
  const auto left = std::max(Clock::duration::zero(), *deadline - Clock::now());
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(left);
  storage.tv_sec = seconds.count();
  storage.tv_nsec = std::chrono::duration_cast<std::chrono::nanoseconds>(left - seconds).count();
  timeout = &storage;
  return 0;
}

}  // namespace

bool poll_upgraded(pollfd* fds, nfds_t count, const timespec* timeout, const sigset_t* mask,
                   int& result) {
  if (!upgrade::any_connections() || fds == nullptr) return false;
  std::vector<Watched> watched = upgraded_entries(fds, count);
  if (watched.empty()) return false;

  std::optional<Clock::time_point> deadline;
  if (timeout != nullptr)
    deadline = Clock::now() + std::chrono::seconds(timeout->tv_sec) +
               std::chrono::nanoseconds(timeout->tv_nsec);
  // The application's fds, then each stream's wait handle.
  std::vector<pollfd> kernel_set(fds, fds + count);
  for (const Watched& entry : watched) {
    kernel_set[entry.index].events |= POLLIN;  // the token, the peer's FIN
    kernel_set.push_back({entry.connection->stream()->transport_wait_handle(), POLLIN, 0});
  }
  for (bool first = true;; first = false) {
    bool something_moved = false;
    for (const Watched& entry : watched)
      something_moved |= entry.connection->stream()->arm_for_readiness();
    const timespec zero{0, 0};
    timespec left_storage;
    const timespec* left = nullptr;
    remaining_timeout(deadline, left_storage, left);
    // Look without sleeping first: a stream may be ready already.
    const int polled = next::ppoll(kernel_set.data(), kernel_set.size(),
                                   first || something_moved ? &zero : left, mask);
    if (polled < 0) {
      result = -1;
      return true;
    }
    int ready = 0;
    size_t next_watched = 0;
    for (nfds_t index = 0; index < count; ++index) {
      short events = kernel_set[index].revents;
      if (next_watched < watched.size() && watched[next_watched].index == index) {
        events = merged_events(watched[next_watched], fds[index].events, events);
        ++next_watched;
      }
      fds[index].revents = events;
      if (events != 0) ++ready;
    }
    if (ready > 0 || (!first && !something_moved && deadline && Clock::now() >= *deadline)) {
      result = ready;
      return true;
    }
  }
}

bool select_upgraded(int count, fd_set* read_set, fd_set* write_set, fd_set* error_set,
                     const timespec* timeout, const sigset_t* mask, int& result) {
  if (!upgrade::any_connections() || count <= 0) return false;
  std::vector<pollfd> fds;
  for (int fd = 0; fd < count && fd < FD_SETSIZE; ++fd) {
    short events = 0;
    if (read_set != nullptr && FD_ISSET(fd, read_set)) events |= POLLIN;
    if (write_set != nullptr && FD_ISSET(fd, write_set)) events |= POLLOUT;
    if (error_set != nullptr && FD_ISSET(fd, error_set)) events |= POLLPRI;
    if (events != 0) fds.push_back({fd, events, 0});
  }
  int polled = 0;
  if (!poll_upgraded(fds.data(), fds.size(), timeout, mask, polled)) return false;
  if (polled < 0) {
    result = -1;
    return true;
  }
  if (read_set != nullptr) FD_ZERO(read_set);
  if (write_set != nullptr) FD_ZERO(write_set);
  if (error_set != nullptr) FD_ZERO(error_set);
  int bits = 0;
  for (const pollfd& entry : fds) {
    // select's view of poll's bits, as the kernel maps them.
    if (read_set != nullptr && (entry.events & POLLIN) && (entry.revents & (POLLIN | POLLHUP | POLLERR))) {
      FD_SET(entry.fd, read_set);
      ++bits;
    }
    if (write_set != nullptr && (entry.events & POLLOUT) && (entry.revents & (POLLOUT | POLLERR))) {
      FD_SET(entry.fd, write_set);
      ++bits;
    }
    if (error_set != nullptr && (entry.events & POLLPRI) && (entry.revents & POLLPRI)) {
      FD_SET(entry.fd, error_set);
      ++bits;
    }
  }
  result = bits;
  return true;
}

void decline_upgrade_for_epoll(int fd) {
  if (!upgrade::any_connections()) return;
  std::shared_ptr<upgrade::Connection> connection = upgrade::find_connection(fd);
  if (connection == nullptr) return;
  if (connection->phase() == upgrade::UpgradePhase::offered) {
    connection->decline("registered with epoll before the upgrade");
    QPSOCK_LOG(info, "fd %d: registered with epoll before its upgrade; it stays on TCP", fd);
  } else if (connection->stream() != nullptr) {
    QPSOCK_LOG(warn, "fd %d: epoll on an upgraded socket is not supported yet; "
               "its readiness may lag", fd);
  }
}

}  // namespace qpsock::readiness
