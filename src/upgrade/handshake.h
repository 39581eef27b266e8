// The side-channel handshake, both roles (docs/upgrade-protocol.md). The
// server (initiator) runs it in the application thread that does the
// connection's first I/O; the client (responder) in the upgrade agent.
#pragma once

#include <cstdint>

#include "upgrade/connection.h"
#include "upgrade/side_channel.h"

namespace qpsock::upgrade {

// On success the connection is established and both ends may switch. 0 or
// -errno; on failure the caller declines the connection (it stays on TCP).
// `peer_socket_inode`: the peer's end of the TCP connection, which the peer
// process must be shown to hold. `tcp` is kept (common/kept_fd.h): the
// handshake may outlast the application's hold on the number.
int run_handshake(Connection& connection, KeptFd tcp, int side_fd, uint64_t peer_socket_inode,
                  Deadline deadline);

// The inode of the other end of TCP connection `tcp_fd` (it is on this
// host), or -errno (find_tcp_socket_inode's: -EPIPE if that end was closed).
int find_peer_socket_inode(int tcp_fd, uint64_t& inode);

// Tells the shm links how long to outlive their last channel (link_idle_time).
void keep_links_as_configured();

}  // namespace qpsock::upgrade
