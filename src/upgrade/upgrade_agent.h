// The per-process upgrade agent: a thread, started on first need, that owns
// the side-channel listeners of this process's client connections and answers
// the servers that come to upgrade them, so an application that is blocked on
// something else never stalls an upgrade. It never touches the data path.
#pragma once

#include <memory>

#include "upgrade/connection.h"
#include "upgrade/side_channel.h"

namespace qpsock::upgrade {

// Hands the listener (owned by the agent from now on) of client connection
// `tcp_fd` to the agent, which answers one server before `deadline` and then
// closes it. If the agent cannot run, the listener is closed and the
// connection declined.
void offer_upgrade(int listener_fd, int tcp_fd, uint64_t tcp_socket_inode,
                   std::weak_ptr<Connection> connection, Deadline deadline);

}  // namespace qpsock::upgrade
