// Fixed-size messages with file descriptors (SCM_RIGHTS) over the connected
// AF_UNIX stream socket the upgrade layer lends us for setup. Each call moves
// exactly its own bytes (the socket carries the upgrade layer's messages
// afterwards) and gives up at the deadline, so a silent peer cannot hang
// setup. The socket may be blocking: every call is MSG_DONTWAIT plus poll.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>

#include "common/unique_fd.h"

namespace qpsock::transport::shm {

using Deadline = std::chrono::steady_clock::time_point;

// Sends `length` bytes, the fds riding with the first byte; 0 or -errno
// (-ETIMEDOUT past the deadline).
int send_message(int socket, const void* data, size_t length, std::span<const int> fds,
                 Deadline deadline);
// Receives exactly `length` bytes and the fds sent with them into `fds`,
// counting them in `fds_received` (more than fds.size() is -EPROTO); 0 or
// -errno (-ECONNRESET at end of stream, -ETIMEDOUT past the deadline).
// -EMFILE: every byte came, but not every fd, for want of descriptors (the
// kernel's or qpsock's limit): the stream is still in step.
int receive_message(int socket, void* data, size_t length, std::span<UniqueFd> fds,
                    size_t& fds_received, Deadline deadline);

}  // namespace qpsock::transport::shm
