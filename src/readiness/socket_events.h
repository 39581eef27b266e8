// The readiness of a socket that may be upgraded, as poll(2) reports a TCP
// socket's: a switched direction's from its stream (data or credit the kernel
// cannot see), the others from what the kernel said of the TCP socket.
#pragma once

#include "upgrade/connection.h"

namespace qpsock::readiness {

// `kernel`: the TCP socket's revents (poll bits; epoll's have the same values)
// for `fd`, one of the socket's numbers. The connection's stream must be
// installed. After the waiter armed the stream, `progress` must be none (see
// Stream::readiness). What TCP holds may be the binding token alone: then
// the receiving direction switches here (Connection::settle_receive_switch)
// and `settled` is set; the stream made progress, so a waiter that armed
// must arm again before it sleeps.
short upgraded_socket_events(upgrade::Connection& connection, int fd, short kernel,
                             stream::Stream::Progress progress, bool& settled);

}  // namespace qpsock::readiness
