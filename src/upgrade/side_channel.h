// The side channel on one host: an abstract AF_UNIX stream socket named after
// the client's TCP socket inode, "\0qpsock/1/<inode>". The client listens
// before its connect() goes out, so the server's first I/O always finds the
// listener of a qpsock client; a plain client has none, and the server's
// attempt fails at once with ECONNREFUSED without anything reaching TCP.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace qpsock::upgrade {

// A listening socket (non-blocking, close-on-exec), or -errno.
int listen_for_upgrade(uint64_t client_socket_inode);
// A connected socket (blocking, close-on-exec), or -errno (-ECONNREFUSED: no listener).
int connect_for_upgrade(uint64_t client_socket_inode);

// Moves exactly `length` bytes before `deadline`: 0, or -errno (-ETIMEDOUT,
// -ECONNRESET when the peer closed). Used only for the handshake's few messages.
using Deadline = std::chrono::steady_clock::time_point;
int send_exactly(int fd, const void* data, size_t length, Deadline deadline);
int receive_exactly(int fd, void* data, size_t length, Deadline deadline);

}  // namespace qpsock::upgrade
