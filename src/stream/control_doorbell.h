// After the switch the TCP connection carries no application bytes: only the
// FIN or RST of a peer that closes or dies, and doorbells. A doorbell is one
// byte a stream writes when it needs its peer's engine to make progress even
// if the peer's application never calls in again: to answer a rendezvous
// cancel. The peer's doorbell watcher (src/upgrade/doorbell_watcher.cc)
// wakes on it; a blocking wait that watches the control fd takes it too.
//
// Each call here holds an FdUse on the kept number (common/kept_fd.h): on a
// number the application has closed it does nothing, and reads `quiet`.
#pragma once

#include "common/kept_fd.h"

namespace qpsock::stream {

inline constexpr char kDoorbellByte = 'D';

// Writes one doorbell byte, never waiting (a full socket buffer already holds
// unread doorbells). Leaves errno as it was.
void ring_doorbell(KeptFd tcp);

// What the control connection holds once its doorbells are taken.
enum class ControlState {
  quiet,        // nothing more (for now)
  end_of_file,  // the peer's FIN
  gone,         // a reset, an error that ended the connection, or a byte that is not a doorbell
};

// Reads every doorbell byte waiting on `tcp` (only after the receiving
// direction switched: before it, TCP bytes are the application's). Leaves
// errno as it was. When gone, `error` (if given) is the socket's error the
// read took (a read clears it: ECONNRESET, ETIMEDOUT...), ECONNRESET for a
// byte that is not a doorbell. An error on a connection the kernel keeps
// open (an ICMP report, with IP_RECVERR) is looked past: it is no end.
ControlState take_doorbells(KeptFd tcp, int* error = nullptr);

enum class DoorbellsPossible : bool { no, yes };

// What the control connection says now: the peer's FIN (end_of_file), a
// reset or an error (gone), or nothing yet (quiet; before the switch, also
// application bytes still to read). Once doorbells are possible (the
// receiving direction switched) they are taken first; before that, TCP
// bytes are the application's, and only a peek looks at them. Leaves errno
// as it was; `error` as for take_doorbells.
ControlState read_control_state(KeptFd tcp, DoorbellsPossible doorbells, int* error = nullptr);
// Whether it reads end of file now (the peer's FIN).
bool control_reads_end_of_file(KeptFd tcp, DoorbellsPossible doorbells);

}  // namespace qpsock::stream
