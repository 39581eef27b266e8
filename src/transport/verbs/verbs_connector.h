// The active side of a verbs connection: resolves the peer's address and a
// route to it (rdma_cm picks the device that serves the source address),
// sets up the transport on that device, and connects with our StreamEndpoint
// in the private data; the peer's comes back in the accept's. Synchronous, on
// the connection's own event channel, bounded by a deadline.
#pragma once

#include <sys/socket.h>

#include "transport/verbs/cm_events.h"
#include "transport/verbs/verbs_connection.h"
#include "transport/verbs/verbs_options.h"

namespace qpsock::transport::verbs {

class VerbsConnector {
 public:
  explicit VerbsConnector(const VerbsOptions& options) : options_(options) {}

  // Connects from `local` (AF_UNSPEC: any source address the route picks;
  // port 0: any port) to the rdma_cm listener at `peer` (IPv4 or IPv6, the
  // same family). 0 with `out` set, or -errno with one warning logged:
  //   -EINVAL        bad options or addresses
  //   -ENODEV        no RDMA device (or no rdma_cm) on this host
  //   -EADDRNOTAVAIL, -EHOSTUNREACH, -ENETUNREACH, -ETIMEDOUT (from rdma_cm)
  //                  no device serves the address, or no route to it
  //   -ECONNREFUSED  the peer rejected us (no listener, or it failed its side)
  //   -EPROTO        the peer's accept carried no hello of ours
  //   -ETIMEDOUT     `deadline` passed
  //   other          a verbs call failed (ibv_alloc_pd, ibv_create_cq, ...)
  int connect(const sockaddr_storage& local, const sockaddr_storage& peer, Deadline deadline,
              VerbsConnection& out) const;

 private:
  VerbsOptions options_;
};

}  // namespace qpsock::transport::verbs
