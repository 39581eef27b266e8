// The readiness of a socket that may be upgraded, as poll(2) reports a TCP
// socket's: a switched direction's from its stream (data or credit the kernel
// cannot see), the others from what the kernel said of the TCP socket.
#pragma once

#include "upgrade/connection.h"

namespace qpsock::readiness {

// `kernel`: the TCP socket's revents (poll bits; epoll's have the same values).
// The connection's stream must be installed.
// After the waiter armed the stream, `progress` must be none (see
// Stream::readiness).
short upgraded_socket_events(upgrade::Connection& connection, short kernel,
                             stream::Stream::Progress progress = stream::Stream::Progress::make);

}  // namespace qpsock::readiness
