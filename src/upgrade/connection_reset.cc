#include "upgrade/connection_reset.h"

#include <sys/socket.h>

#include "libc/next_symbols.h"
#include "upgrade/connection_registry.h"

namespace qpsock::upgrade {

void reset_upgraded_connection(int fd, Connection& connection) {
  // The reset goes first: a peer that found the stream's link gone before
  // it could have ended in order (end of stream) for it.
  const KeptFd socket = keep_fd(fd);
  if (find_connection(fd).get() == &connection) {
    if (const FdUse use(socket); use) {
      sockaddr unspecified{};
      unspecified.sa_family = AF_UNSPEC;
      next::connect(use.fd(), &unspecified, sizeof(unspecified));
    }
  }
  if (stream::Stream* stream = connection.stream()) stream->abort();
}

void reset_when_closed(int fd) {
  const linger abortive{1, 0};
  next::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof(abortive));
}

}  // namespace qpsock::upgrade
