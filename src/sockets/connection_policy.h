// What qpsock.conf says about a new TCP connection, asked once per connection
// when connect or accept establishes it.
#pragma once

#include <sys/socket.h>

#include "config/config.h"

namespace qpsock::sockets {

// Decides for a connection on `fd` (the peer address may be null: it is then
// asked of the kernel) and logs the decision at info level. Loads the
// configuration on first use, which reports any bad config line once. Leaves
// errno as it was.
config::Decision decide_for_connection(int fd, config::Role role, const sockaddr* peer = nullptr);

}  // namespace qpsock::sockets
