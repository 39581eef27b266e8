#include "sockets/socket_lifecycle.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <limits>
#include <cstring>

#include "common/errno_guard.h"
#include "common/kept_fd.h"
#include "common/own_descriptor.h"
#include "sockets/connection_accounting.h"
#include "sockets/connection_policy.h"
#include "sockets/fd_table.h"
#include "libc/next_symbols.h"
#include "libc/own_library_calls.h"
#include "readiness/upgraded_epoll.h"
#include "upgrade/connection_registry.h"
#include "upgrade/socket_upgrade.h"

namespace qpsock::sockets {
namespace {

FdTable& table() { return FdTable::process_table(); }

// The peer's address as accept wrote it for the application, if whole (a
// getpeername saved); null otherwise.
const sockaddr* accepted_peer(const sockaddr* address, const socklen_t* length) {
  if (address == nullptr || length == nullptr) return nullptr;
  if (address->sa_family == AF_INET && *length >= sizeof(sockaddr_in)) return address;
  if (address->sa_family == AF_INET6 && *length >= sizeof(sockaddr_in6)) return address;
  return nullptr;
}

// A connection accepted from a tracked listener is tracked too.
int record_accepted(int listener_fd, int accepted, const sockaddr* address, const socklen_t* length) {
  if (accepted >= 0) {
    FdRecord listener = table().lookup(listener_fd);
    if (listener.tracked()) {
      table().track_new(accepted, listener.kind, listener.family);
      table().inherit_buffer_sizes(listener_fd, accepted);
      ConnectionEndpoints endpoints;
      read_connection_endpoints(accepted, accepted_peer(address, length), endpoints);
      const config::Decision decision = decide_for_connection(accepted, config::Role::server, endpoints);
      if (decision.action == config::Action::offload)
        upgrade::offer_server_upgrade(accepted, connection_stats_handle);
      record_connection(accepted, config::Role::server, decision, endpoints);
    } else {
      table().forget(accepted);
    }
  }
  return accepted;
}

// The application's file at `fd` is about to go (close, or dup2/dup3 over
// it): its connection moves to another number of the socket or ends its
// stream, it leaves the epoll sets, and from here no call of qpsock's
// touches the number (common/kept_fd.h).
void number_closing(int fd) {
  upgrade::connection_closing(fd);
  readiness::fd_closing(fd);
  fence_fd_close(fd);
}

// dup2 and dup3 put old_fd's file on new_fd, closing what was there first,
// unless they fail (old_fd no open fd, new_fd out of range, dup3's flags
// bad: then they change nothing) or new_fd already holds that very file
// (then nothing is closed, and the calls under way on it go on).
void number_about_to_be_replaced(int old_fd, int new_fd, int flags = 0) {
  if (old_fd == new_fd || new_fd < 0 || (flags & ~O_CLOEXEC) != 0) return;
  const ErrnoGuard errno_guard;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && static_cast<rlim_t>(new_fd) >= limit.rlim_cur) return;
  struct stat old_file {}, new_file {};
  if (fstat(old_fd, &old_file) != 0) return;
  if (fstat(new_fd, &new_file) == 0 && new_file.st_dev == old_file.st_dev &&
      new_file.st_ino == old_file.st_ino)
    return;
  number_closing(new_fd);
  forget_own_descriptor(new_fd);
}

}  // namespace

bool is_trackable_socket(int domain, int type, int protocol) {
  int base_type = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
  return (domain == AF_INET || domain == AF_INET6) && base_type == SOCK_STREAM &&
         (protocol == 0 || protocol == IPPROTO_TCP);
}

int socket(int domain, int type, int protocol) {
  int fd = next::socket(domain, type, protocol);
  if (fd >= 0) {
    // A fresh fd number may still carry the record of an fd closed behind our
    // back (a raw syscall); overwrite it either way.
    if (is_trackable_socket(domain, type, protocol)) {
      table().track_new(fd, SocketKind::tcp, static_cast<uint8_t>(domain));
    } else {
      table().forget(fd);
    }
  }
  return fd;
}

int socketpair(int domain, int type, int protocol, int fds[2]) {
  int result = next::socketpair(domain, type, protocol, fds);
  if (result == 0) {
    table().forget(fds[0]);
    table().forget(fds[1]);
  }
  return result;
}

int bind(int fd, const sockaddr* address, socklen_t length) {
  return next::bind(fd, address, length);
}

int listen(int fd, int backlog) { return next::listen(fd, backlog); }

int accept(int fd, sockaddr* address, socklen_t* length) {
  return record_accepted(fd, next::accept(fd, address, length), address, length);
}

int accept4(int fd, sockaddr* address, socklen_t* length, int flags) {
  return record_accepted(fd, next::accept4(fd, address, length, flags), address, length);
}

int connect(int fd, const sockaddr* address, socklen_t length) {
  // Decided before the SYN goes out: an upgradable client's side-channel
  // listener must exist before the server can first do I/O.
  bool decided = false, offered = false;
  config::Decision decision{config::Action::kernel, {}};
  const FdRecord record = table().lookup(fd);
  if (address != nullptr && (address->sa_family == AF_INET || address->sa_family == AF_INET6) &&
      record.tracked() && upgrade::find_connection(fd) == nullptr) {
    ConnectionEndpoints endpoints;
    read_client_endpoints(fd, record.family, address, endpoints);
    decision = decide_for_connection(fd, config::Role::client, endpoints);
    decided = true;
    if (decision.action == config::Action::offload) {
      upgrade::offer_client_upgrade(fd, address, length);
      offered = true;
    }
  }
  int result = next::connect(fd, address, length);
  const bool established = result == 0 || errno == EINPROGRESS;
  if (offered && !established) upgrade::withdraw_upgrade(fd);
  if (decided && established) {
    // The local address as connect bound it.
    ConnectionEndpoints endpoints;
    read_connection_endpoints(fd, address, endpoints);
    record_connection(fd, config::Role::client, decision, endpoints);
  }
  return result;
}

int close(int fd) {
  // libibverbs and librdmacm closing their own channels (never a socket of
  // the program's), maybe from a connection's teardown.
  if (libc::inside_own_library_call) [[unlikely]] return close_descriptor(fd);
  // Forget first: until the kernel closes the fd no other socket can take its
  // number, so the record can never be cleared from under a new socket.
  record_fd_close(fd);
  table().forget(fd);
  number_closing(fd);
  return close_descriptor(fd);
}

namespace {

// close's bookkeeping for the fds of [first, last] (ends included) that
// qpsock may know of: none lies above the highest it ever recorded.
void range_closing(unsigned first, unsigned last) {
  const int highest = std::max({upgrade::highest_connection_fd(), highest_kept_fd(),
                                readiness::highest_epoll_set_fd()});
  if (highest < 0 || first > static_cast<unsigned>(highest)) return;
  const ErrnoGuard errno_guard;
  const int end = static_cast<int>(std::min(last, static_cast<unsigned>(highest)));
  for (int fd = static_cast<int>(first); fd <= end; ++fd) {
    record_fd_close(fd);
    table().forget(fd);
    number_closing(fd);
  }
}

// The kernel's close_range over [first, last] but for qpsock's own
// descriptors (common/own_descriptor.h), in as many calls as they split it.
int close_range_around_own(unsigned first, unsigned last) {
  constexpr unsigned kHighest = static_cast<unsigned>(std::numeric_limits<int>::max());
  for (unsigned from = first;;) {
    const int own = from > kHighest ? -1
                                    : next_own_descriptor(static_cast<int>(from),
                                                          static_cast<int>(std::min(last, kHighest)));
    if (own < 0) return next::close_range(from, last, 0);
    const auto kept = static_cast<unsigned>(own);
    if (kept > from)
      if (const int result = next::close_range(from, kept - 1, 0); result != 0) return result;
    if (kept == last) return 0;
    from = kept + 1;
  }
}

}  // namespace

int close_range(unsigned first, unsigned last, int flags) {
  // Only a valid call closes anything: CLOSE_RANGE_CLOEXEC closes nothing
  // now, and CLOSE_RANGE_UNSHARE closes only in the caller's own copy of
  // the fd table (other threads keep theirs, and their connections).
  if (first <= last && flags == 0) {
    range_closing(first, last);
    return close_range_around_own(first, last);
  }
  return next::close_range(first, last, flags);
}

void closefrom(int lowest) {
  if (lowest < 0) return next::closefrom(lowest);
  range_closing(static_cast<unsigned>(lowest), ~0u);
  // Without close_range (before Linux 5.9) glibc's own closefrom, which
  // closes every number above: qpsock's then go too, as before.
  const ErrnoGuard errno_guard;
  if (close_range_around_own(static_cast<unsigned>(lowest), ~0u) != 0) next::closefrom(lowest);
}

int shutdown(int fd, int how) {
  if (auto connection = upgrade::connection_for_io(fd)) return connection->shutdown(fd, how);
  return next::shutdown(fd, how);
}

int dup(int fd) {
  int duplicate = next::dup(fd);
  if (duplicate >= 0) {
    table().copy(fd, duplicate);
    record_fd_copy(fd, duplicate);
    upgrade::connection_copied(fd, duplicate);
  }
  return duplicate;
}

int dup2(int old_fd, int new_fd) {
  number_about_to_be_replaced(old_fd, new_fd);
  int result = next::dup2(old_fd, new_fd);
  if (result >= 0 && old_fd != new_fd) {
    table().copy(old_fd, new_fd);
    record_fd_copy(old_fd, new_fd);
    upgrade::connection_copied(old_fd, new_fd);
  }
  return result;
}

int dup3(int old_fd, int new_fd, int flags) {
  number_about_to_be_replaced(old_fd, new_fd, flags);
  int result = next::dup3(old_fd, new_fd, flags);
  if (result >= 0) {
    table().copy(old_fd, new_fd);
    record_fd_copy(old_fd, new_fd);
    upgrade::connection_copied(old_fd, new_fd);
  }
  return result;
}

int fcntl(int fd, int command, long argument) {
  int result = next::fcntl(fd, command, argument);
  if (result >= 0 && (command == F_DUPFD || command == F_DUPFD_CLOEXEC)) {
    table().copy(fd, result);
    record_fd_copy(fd, result);
    upgrade::connection_copied(fd, result);
  }
  return result;
}

int ioctl(int fd, unsigned long request, void* argument) {
  // FIONREAD is SIOCINQ, TIOCOUTQ is SIOCOUTQ.
  if ((request == FIONREAD || request == SIOCOUTQ) && argument != nullptr) {
    if (auto connection = upgrade::connection_for_io(fd)) {
      int& bytes = *static_cast<int*>(argument);
      const int error = request == FIONREAD ? connection->readable_bytes(fd, bytes)
                                            : connection->unsent_bytes(fd, bytes);
      if (error == 0) return 0;
      errno = -error;
      return -1;
    }
  }
  return next::ioctl(fd, request, argument);
}

int getsockopt(int fd, int level, int name, void* value, socklen_t* length) {
  if (level == SOL_SOCKET && name == SO_ERROR && value != nullptr && length != nullptr &&
      *length >= static_cast<socklen_t>(sizeof(int))) {
    if (auto connection = upgrade::connection_for_io(fd)) {
      int pending = 0;
      if (const int error = connection->take_error(fd, pending); error < 0) {
        errno = -error;
        return -1;
      }
      memcpy(value, &pending, sizeof(pending));
      *length = sizeof(pending);
      return 0;
    }
  }
  return next::getsockopt(fd, level, name, value, length);
}

int setsockopt(int fd, int level, int name, const void* value, socklen_t length) {
  const int result = next::setsockopt(fd, level, name, value, length);
  // Remembered for an upgrade: the stream honours them as TCP does.
  if (result == 0 && level == SOL_SOCKET && value != nullptr &&
      length >= static_cast<socklen_t>(sizeof(int))) {
    int bytes = 0;
    memcpy(&bytes, value, sizeof(bytes));
    const uint32_t requested = bytes > 0 ? static_cast<uint32_t>(bytes) : 0;
    if (name == SO_RCVBUF || name == SO_RCVBUFFORCE) table().set_receive_buffer(fd, requested);
    if (name == SO_SNDBUF || name == SO_SNDBUFFORCE) table().set_send_buffer(fd, requested);
    if (name == SO_RCVLOWAT) {
      // A stream installed later copies it at install.
      if (auto connection = upgrade::find_connection(fd)) connection->receive_low_water_changed(fd);
    }
  }
  return result;
}

int getsockname(int fd, sockaddr* address, socklen_t* length) {
  return next::getsockname(fd, address, length);
}

int getpeername(int fd, sockaddr* address, socklen_t* length) {
  return next::getpeername(fd, address, length);
}

}  // namespace qpsock::sockets
