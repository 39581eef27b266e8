// A stream whose rendezvous nobody takes withdraws it, and must hear the
// peer's answer before it may copy the bytes instead; the peer answers from
// its engine's progress, which its application makes only when it calls in.
// The doorbell watcher makes it for an application that does not: the
// background loop (common/background_loop.h) watches the TCP sockets of
// upgraded connections (which after the switch carry nothing but doorbells,
// FIN and RST, so it costs no wakeup while streams run) and, when the peer
// rings (stream/control_doorbell.h), lets the stream answer. A
// writer that waits for room rings too (Stream::answer_peer).
#pragma once

#include "common/kept_fd.h"

namespace qpsock::upgrade {

// The connection's stream is installed (or its receiving direction
// switched to it): watch its TCP socket, `tcp` (added under an FdUse: never a number the application
// closed). A wakeup looks the connection up by number again, and it takes
// doorbells only through its own kept number. If the loop cannot watch it,
// peers' cancels wait for the application's next call on the socket.
void watch_for_doorbells(KeptFd tcp);

}  // namespace qpsock::upgrade
