// The per-process upgrade agent: a thread, started on first need, that owns
// the side-channel listeners of this process's client connections and answers
// the servers that come to upgrade them, so an application that is blocked on
// something else never stalls an upgrade. It never touches the data path.
#pragma once

#include <memory>

#include "transport/verbs/verbs_listener.h"
#include "upgrade/connection.h"
#include "upgrade/side_channel.h"

namespace qpsock::upgrade {

// What a client connection offers a server: a same-host listener (an
// AF_UNIX socket, side_channel.h), an rdma_cm listener (verbs_upgrade.h), or
// both; the first server to come takes the upgrade, and both then close.
struct ClientListeners {
  int same_host_fd = -1;
  std::unique_ptr<transport::verbs::VerbsListener> rdma;
};

// Hands the listeners (owned by the agent from now on) of client connection
// `tcp_fd` to the agent, which answers one server before `deadline` and then
// closes them. If the agent cannot run, they are closed and the connection
// declined.
void offer_upgrade(ClientListeners listeners, int tcp_fd, uint64_t tcp_socket_inode,
                   std::weak_ptr<Connection> connection, Deadline deadline);

}  // namespace qpsock::upgrade
