// Sockets handed to another process over an AF_UNIX socket (SCM_RIGHTS):
// that process does I/O on them that this one's qpsock never sees, so no
// stream of this process may be behind them.
#include <fcntl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include "common/errno_guard.h"
#include "common/log.h"
#include "config/config_loader.h"
#include "libc/next_symbols.h"
#include "upgrade/connection_registry.h"
#include "upgrade/connection_reset.h"
#include "upgrade/socket_upgrade.h"

namespace qpsock::upgrade {
namespace {

// How often a pass looks whether a handshake under way has ended.
constexpr auto kNegotiationPoll = std::chrono::milliseconds(1);

// Whether a call on `carrier_fd` with `flags` may wait (for a handshake under way).
bool may_wait(int carrier_fd, int flags) {
  if ((flags & MSG_DONTWAIT) != 0) return false;
  const int status = next::fcntl(carrier_fd, F_GETFL, 0);
  return status < 0 || (status & O_NONBLOCK) == 0;
}

// How long a call that may not wait (MSG_DONTWAIT, a non-blocking carrier)
// gives a handshake under way before it resets the connection: an EAGAIN
// would leave an edge-triggered event loop waiting for a writable carrier
// that already is.
constexpr std::chrono::microseconds kNonBlockingPatience = std::chrono::milliseconds(100);

void settle_before_passing(int fd, Connection& connection, int carrier_fd, int flags) {
  if (connection.inherited_stream()) {
    QPSOCK_LOG(warn, "fd %d: passed to another process (SCM_RIGHTS), but its stream is the "
               "process's that forked this one: the receiver will find no data", fd);
    return;
  }
  // A handshake under way (the upgrade worker's, the agent's, another
  // thread's) cannot be declined from here (it would install its stream all
  // the same): it is waited for, with no lock held, and ends within the
  // upgrade timeout one way or the other.
  std::optional<std::chrono::steady_clock::time_point> give_up;
  for (;;) {
    switch (connection.phase()) {
      case UpgradePhase::offered:
        // TCP serves both processes exactly, and nothing will switch. Only
        // from offered: a handshake that began meanwhile is waited for.
        if (!connection.decline_if_offered("passed to another process (SCM_RIGHTS)")) continue;
        QPSOCK_LOG(info, "fd %d: passed to another process (SCM_RIGHTS) before its upgrade; "
                   "stays on TCP", fd);
        return;
      case UpgradePhase::negotiating: {
        const auto now = std::chrono::steady_clock::now();
        if (!give_up) {
          give_up = now + (may_wait(carrier_fd, flags)
                               ? config::process_config().tunables().upgrade_timeout +
                                     std::chrono::seconds(1)
                               : kNonBlockingPatience);
        }
        if (now < *give_up) {
          std::this_thread::sleep_for(kNegotiationPoll);
          continue;
        }
        // Whatever it installs later finds the TCP connection reset.
        QPSOCK_LOG(error, "fd %d: passed to another process (SCM_RIGHTS) while its upgrade "
                   "still ran; resetting it", fd);
        reset_upgraded_connection(fd, connection);
        return;
      }
      case UpgradePhase::declined:
        return;
      case UpgradePhase::established:
        // Its stream lives in this process and cannot be handed over yet: the
        // receiver would read an empty socket, or qpsock's binding token.
        QPSOCK_LOG(error, "fd %d: an upgraded connection cannot be passed to another process "
                   "(SCM_RIGHTS) yet; resetting it", fd);
        reset_upgraded_connection(fd, connection);
        return;
    }
  }
}

}  // namespace

void connections_before_passing(int carrier_fd, const msghdr& message, int flags) {
  // Without connections nothing is read (one test of a counter): a bad
  // pointer is the kernel's to refuse.
  if (!any_connections_or_offers() || message.msg_control == nullptr ||
      message.msg_controllen < sizeof(cmsghdr))
    return;
  ErrnoGuard errno_guard;
  // The macros only read; they take a non-const header.
  auto& readable = const_cast<msghdr&>(message);
  const auto* control_end = static_cast<const unsigned char*>(message.msg_control) + message.msg_controllen;
  for (cmsghdr* header = CMSG_FIRSTHDR(&readable); header != nullptr;
       header = CMSG_NXTHDR(&readable, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS ||
        header->cmsg_len < CMSG_LEN(0))
      continue;
    // A length past the buffer is the kernel's to refuse (EINVAL): read no further.
    const unsigned char* data = CMSG_DATA(header);
    const size_t room = control_end > data ? static_cast<size_t>(control_end - data) : 0;
    const size_t carried = std::min<size_t>(header->cmsg_len - CMSG_LEN(0), room) / sizeof(int);
    for (size_t index = 0; index < carried; ++index) {
      int fd = -1;
      std::memcpy(&fd, data + index * sizeof(int), sizeof(int));
      // An offer not yet claimed is claimed here, and so declined: TCP for good.
      if (std::shared_ptr<Connection> connection = claim_offered_connection(fd).shared())
        settle_before_passing(fd, *connection, carrier_fd, flags);
    }
  }
}

}  // namespace qpsock::upgrade
