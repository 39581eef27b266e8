// Ending an upgraded connection whose stream cannot go where its socket goes
// (a new program image, another process): both ends see a reset rather than
// a silently broken stream.
#pragma once

#include "upgrade/connection.h"

namespace qpsock::upgrade {

// Aborts `connection`'s stream and disconnects the TCP socket `fd` with a
// reset (connect(AF_UNSPEC)): the peer's qpsock hears it on the TCP
// connection, and whoever holds the socket next finds it unconnected. `fd`
// is kept and checked to be the connection's before the reset, which is made
// under a use (common/kept_fd.h): another thread may have closed it.
void reset_upgraded_connection(int fd, Connection& connection);

// The kernel ends the TCP connection with a reset when `fd` (its last
// number, or the process) closes: SO_LINGER with no time. Signal-safe.
void reset_when_closed(int fd);

}  // namespace qpsock::upgrade
