#include "upgrade/connection_reset.h"

#include <sys/socket.h>

#include "libc/next_symbols.h"

namespace qpsock::upgrade {

void reset_upgraded_connection(int fd, Connection& connection) {
  // The reset goes first: a peer that found the stream's link gone before
  // it could have ended in order (end of stream) for it.
  sockaddr unspecified{};
  unspecified.sa_family = AF_UNSPEC;
  next::connect(fd, &unspecified, sizeof(unspecified));
  if (stream::Stream* stream = connection.stream()) stream->abort();
}

}  // namespace qpsock::upgrade
