#include "readiness/socket_events.h"

#include <poll.h>

namespace qpsock::readiness {

short upgraded_socket_events(upgrade::Connection& connection, int fd, short kernel,
                             stream::Stream::Progress progress, bool& settled) {
  stream::Stream* stream = connection.stream();
  if (stream == nullptr) return kernel;  // a forked child's copy of its parent's connection
  if ((kernel & POLLIN) != 0 && fd >= 0 && !connection.receiving_switched() &&
      connection.settle_receive_switch(fd))
    settled = true;
  const short stream_events = stream->readiness(progress);
  constexpr short read_bits = POLLIN | POLLRDNORM | POLLRDHUP;
  constexpr short write_bits = POLLOUT | POLLWRNORM;
  constexpr short failure_bits = POLLHUP | POLLERR;
  short events = 0;
  events |= (connection.receiving_switched() ? stream_events : kernel) & read_bits;
  events |= (connection.sending_switched() ? stream_events : kernel) & write_bits;
  events |= (connection.switched() ? stream_events : kernel) & failure_bits;
  // Urgent data never travels on a stream; the kernel's word on it stands.
  events |= kernel & POLLPRI;
  return events;
}

}  // namespace qpsock::readiness
