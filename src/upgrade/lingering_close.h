// A socket the application closed while its stream still holds written
// bytes in its send backlog: as TCP's close returns at once and the kernel
// goes on sending what its send buffer holds, then the FIN (an orphaned
// socket, tcp_close), the connection lingers here. A private duplicate of
// the socket keeps the TCP connection open; the timer thread pushes the
// held bytes as the peer gives room, then closes the stream (its end of
// stream) and queues the FIN, and keeps the duplicate open, reading the
// peer's doorbells, until TCP's send queue is empty: a doorbell reaching a
// closed socket makes its kernel reset the connection, which throws the
// send queue away. A close with nothing held but bytes in TCP's send queue
// ends its stream at once and drains the same way. A peer that takes nothing for kLingerPatience gets
// a reset, never an orderly end after a part.
#pragma once

#include <chrono>
#include <memory>

#include "stream/stream.h"

namespace qpsock::upgrade {

class Connection;

inline constexpr std::chrono::seconds kLingerPatience{60};

// The application is closing `fd`, the last number of `connection`'s
// socket. True if the connection now lingers (its stream holds bytes, and
// a duplicate could be made); false: close it now.
bool linger_after_close(const std::shared_ptr<Connection>& connection, int fd);
// Whether any connection lingers (cheap: an atomic load).
bool any_lingering();
// The application is closing `fd`, the last number of `connection`'s
// socket, whose stream has just ended in order: if TCP's send queue still
// holds bytes, a duplicate keeps the socket open, reading doorbells, until
// the queue is empty (the FIN then follows them).
void drain_after_close(const std::shared_ptr<Connection>& connection, int fd);
// The timer's step (ConnectionTimer::linger).
void continue_lingering(const std::shared_ptr<Connection>& connection);
// The process ends: each lingering stream delivers what it can in the
// time given (Stream::deliver_before_exit); one that cannot is reset.
void lingering_before_exit(std::chrono::steady_clock::time_point deadline,
                           stream::Stream::ExitCall call);
// A forked child does not send its parent's lingering bytes: it lets go of
// its copies of the duplicates (the parent's stay open).
void lingering_after_fork_in_child();

}  // namespace qpsock::upgrade
