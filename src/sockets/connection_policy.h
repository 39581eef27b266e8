// What qpsock.conf says about a new TCP connection, asked once per connection
// when connect or accept establishes it.
#pragma once

#include <sys/socket.h>

#include "config/config.h"

namespace qpsock::sockets {

struct ConnectionEndpoints {
  sockaddr_storage local{};  // ss_family AF_UNSPEC when unknown
  sockaddr_storage peer{};
  bool local_read = true;    // false: local is the wildcard, not asked of the kernel
};

// fd's local address (asked of the kernel) and its peer's (`peer` if given,
// else asked of the kernel). Leaves errno as it was.
void read_connection_endpoints(int fd, const sockaddr* peer, ConnectionEndpoints& endpoints);
// A client's, before its connect, to `peer`: its local address is asked of
// the kernel only if the config's decision for clients reads it; else it
// stands as the wildcard address of `family` (what an unbound socket has).
void read_client_endpoints(int fd, int family, const sockaddr* peer, ConnectionEndpoints& endpoints);

// Decides for a connection on `fd` whose endpoints are `endpoints`
// (read_connection_endpoints) and logs the decision at info level. Loads the
// configuration on first use, which reports any bad config line once. Leaves
// errno as it was.
config::Decision decide_for_connection(int fd, config::Role role, const ConnectionEndpoints& endpoints);

}  // namespace qpsock::sockets
