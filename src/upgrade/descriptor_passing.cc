// Sockets handed to another process over an AF_UNIX socket (SCM_RIGHTS):
// that process does I/O on them that this one's qpsock never sees, so no
// stream of this process may be behind them.
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/errno_guard.h"
#include "common/log.h"
#include "config/config_loader.h"
#include "upgrade/connection_registry.h"
#include "upgrade/connection_reset.h"
#include "upgrade/socket_upgrade.h"

namespace qpsock::upgrade {
namespace {

// How often a pass looks whether a handshake under way has ended.
constexpr auto kNegotiationPoll = std::chrono::milliseconds(1);

void settle_before_passing(int fd, Connection& connection) {
  if (connection.inherited_stream()) {
    QPSOCK_LOG(warn, "fd %d: passed to another process (SCM_RIGHTS), but its stream is the "
               "process's that forked this one: the receiver will find no data", fd);
    return;
  }
  // A handshake under way (the upgrade worker's, the agent's, another
  // thread's) ends within the upgrade timeout, one way or the other; no lock
  // is held while it runs.
  const auto give_up = std::chrono::steady_clock::now() +
                       config::process_config().tunables().upgrade_timeout + std::chrono::seconds(1);
  while (connection.phase() == UpgradePhase::negotiating && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(kNegotiationPoll);
  switch (connection.phase()) {
    case UpgradePhase::offered:
    case UpgradePhase::negotiating:
      // TCP serves both processes exactly, and nothing will switch.
      QPSOCK_LOG(info, "fd %d: passed to another process (SCM_RIGHTS) before its upgrade; "
                 "stays on TCP", fd);
      connection.decline("passed to another process (SCM_RIGHTS)");
      return;
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

}  // namespace

void connections_before_passing(const msghdr& message) {
  if (message.msg_control == nullptr || message.msg_controllen < sizeof(cmsghdr) ||
      !any_connections())
    return;
  ErrnoGuard errno_guard;
  // The macros only read; they take a non-const header.
  auto& readable = const_cast<msghdr&>(message);
  for (cmsghdr* header = CMSG_FIRSTHDR(&readable); header != nullptr;
       header = CMSG_NXTHDR(&readable, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS ||
        header->cmsg_len < CMSG_LEN(0))
      continue;
    const size_t carried = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t index = 0; index < carried; ++index) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(header) + index * sizeof(int), sizeof(int));
      if (std::shared_ptr<Connection> connection = find_connection(fd))
        settle_before_passing(fd, *connection);
    }
  }
}

}  // namespace qpsock::upgrade
