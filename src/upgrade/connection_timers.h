// What a connection's stream must do later even if the application never
// calls in again, done on the background loop's thread
// (common/background_loop.h):
// - MSG_MORE corks bytes until the application's next call on the stream;
//   TCP does not wait for ever: it sends a corked segment within about
//   200 ms, and a peer may well be waiting for it (a request sent with
//   MSG_MORE and then nothing).
// - A server that asked for a channel over a link gives up at the upgrade's
//   deadline if the client has not answered.
// - A writer that finds the peer's ring full asks the peer for room once it
//   has waited the stream's room_patience: the peer's application may not
//   be reading, and TCP's buffers would have taken more. While bytes are
//   held in its send backlog, it looks again now and then (a doorbell
//   that raced the peer's credit must not leave them there).
#pragma once

#include <chrono>
#include <memory>

namespace qpsock::upgrade {

class Connection;

// Linux's TCP sends corked data after 200 ms (TCP_CORK's limit).
inline constexpr std::chrono::milliseconds kCorkLimit{200};

enum class ConnectionTimer : uint8_t {
  flush_cork,    // Connection::flush_cork
  ask_for_room,  // Connection::ask_for_room
  linger,        // continue_lingering (upgrade/lingering_close.h)
  link_answer,   // link_answer_overdue (upgrade/link_upgrade.h)
};

// Calls the timer's action on the connection `delay` from now, unless the
// connection is gone by then. The timers keep the connection weakly, never
// its fd number. If the loop cannot run them, nothing is done later (the
// next call on the stream does it, as before).
void run_later(ConnectionTimer timer, std::weak_ptr<Connection> connection,
               std::chrono::steady_clock::duration delay);

}  // namespace qpsock::upgrade
