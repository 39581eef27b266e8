// The per-process upgrade agent: a thread, started on first need, that owns
// the side-channel listeners of this process's client connections and answers
// the servers that come to upgrade them, so an application that is blocked on
// something else never stalls an upgrade. It never touches the data path.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <optional>

#include "transport/verbs/verbs_listener.h"
#include "upgrade/connection.h"
#include "upgrade/side_channel.h"

namespace qpsock::upgrade {

// Where and how a client's rdma_cm listener listens (verbs_upgrade.h).
struct RdmaListenerPlan {
  sockaddr_storage meeting{};
  transport::verbs::VerbsOptions options;
};

// A delay at least this long (shm_upgrade_delay, rdma_upgrade_delay) has
// the agent open the client's listener half of it after the connect, if the
// connection is still open then, while the server waits the whole delay
// after its first I/O; a connection closed sooner costs its client nothing
// more than its Connection. Below it the listener opens before the SYN: the
// worker may begin a server's attempt up to 10 ms early (it batches), and
// half a short delay would leave the agent no time to open it first.
inline constexpr std::chrono::milliseconds kShortestPlannedListenerDelay{40};

// What a client connection offers a server: a same-host listener (an
// AF_UNIX socket, side_channel.h) or the time to open it (half of
// shm_upgrade_delay after the connect, as for rdma_cm), an rdma_cm listener
// (verbs_upgrade.h) or the plan of one, or both; the first server to come
// takes the upgrade, and both then close.
struct ClientListeners {
  int same_host_fd = -1;
  std::optional<std::chrono::steady_clock::time_point> planned_same_host;
  std::unique_ptr<transport::verbs::VerbsListener> rdma;
  // When the agent prepares and opens the rdma_cm listener.
  std::optional<std::chrono::steady_clock::time_point> planned_rdma;

  // When the first planned listener is due, if one is.
  std::optional<std::chrono::steady_clock::time_point> next_planned() const;
};

// Hands the listeners (owned by the agent from now on) of client connection
// `tcp_fd` to the agent, which answers one server before `deadline` and then
// closes them. If the agent cannot run, they are closed and the connection
// declined.
void offer_upgrade(ClientListeners listeners, int tcp_fd, uint64_t tcp_socket_inode,
                   std::weak_ptr<Connection> connection, Deadline deadline);

// Wakes the agent, which then opens the planned same-host listener of each
// connection that moved half of shm_upgrade_bytes over TCP. Only once some
// offer went to the agent; safe in a signal handler (an eventfd write).
void wake_upgrade_agent();

}  // namespace qpsock::upgrade
