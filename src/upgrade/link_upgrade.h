// The same-host upgrade of a connection between two processes that already
// share a link (transport/shm/link_channels.h): no side channel, listener
// or handshake of its own. The server, once its attempt has begun, finds the
// client's socket offered on a link and asks for a channel there; the
// client's agent answers from its offer. Each end installs its stream and
// proves the TCP connection in band, with its Hello and binding token as
// over RDMA (Connection::install_announced): a channel whose peer never
// proves it carries nothing, and the connection stays on TCP.
#pragma once

#include <cstdint>
#include <memory>

#include "transport/shm/link_channels.h"
#include "upgrade/connection.h"
#include "upgrade/side_channel.h"

namespace qpsock::upgrade {

// Server, its attempt begun (the phase is negotiating), the client's socket
// being `client_inode`: false if no link offers it (the caller tries the
// side channel); else true: the channel is asked for, and the background
// loop installs it when the client answers (or declines the connection on
// a refusal, or at `deadline`), with one log line either way. Nothing
// waits for the answer: a burst of connections is asked for at once.
bool attempt_over_link(Connection& connection, KeptFd tcp, uint64_t client_inode, Deadline deadline);
// The connection timer at the deadline of such an attempt: declined if
// still unanswered.
void link_answer_overdue(Connection& connection);

// Whether some link offers `client_inode` (an early attempt tries it at once).
bool offered_on_a_link(uint64_t client_inode);

// Client, its negotiation begun for the socket at `tcp`: the channel the
// server asked for in `request`, answered (refused on failure). 0 once the
// stream is installed (an answer that cannot be sent leaves the server to
// give up, and the stream then gives itself up), or -errno.
int accept_link_channel(Connection& connection, KeptFd tcp,
                        const std::shared_ptr<transport::shm::PeerProcess>& link,
                        const transport::shm::ChannelRequest& request);

// Client: refuses `request` (no offer of it, or the offer declined).
void refuse_link_channel(const std::shared_ptr<transport::shm::PeerProcess>& link,
                         const transport::shm::ChannelRequest& request, int error);

}  // namespace qpsock::upgrade
