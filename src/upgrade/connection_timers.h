// MSG_MORE corks bytes until the application's next call on the stream; TCP
// does not wait for ever: it sends a corked segment within about 200 ms, and
// a peer may well be waiting for it (a request sent with MSG_MORE and then
// nothing). The cork flusher is a thread, started on first need, that
// announces such bytes once they have waited kCorkLimit.
#pragma once

#include <chrono>
#include <memory>

namespace qpsock::upgrade {

class Connection;

// Linux's TCP sends corked data after 200 ms (TCP_CORK's limit).
inline constexpr std::chrono::milliseconds kCorkLimit{200};

// The connection's stream holds bytes sent with MSG_MORE and not yet
// announced: announce them kCorkLimit from now unless a later call does.
// The flusher keeps the connection itself (weakly), never its fd number. If
// no thread can be started, the bytes wait for the next call, as before.
void flush_cork_later(std::weak_ptr<Connection> connection);

}  // namespace qpsock::upgrade
