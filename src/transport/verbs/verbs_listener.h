// The passive side of verbs connections: an rdma_cm listener on a local
// address, which accepts one connection per accept() call, synchronously on
// its own event channel and bounded by a deadline. Each accepted connection
// moves to an event channel of its own (the transport's).
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <memory>

#include "transport/verbs/cm_events.h"
#include "transport/verbs/verbs_connection.h"
#include "transport/verbs/verbs_handles.h"
#include "transport/verbs/verbs_options.h"

namespace qpsock::transport::verbs {

class VerbsListener {
  struct ConstructionKey {
    explicit ConstructionKey() = default;
  };

 public:
  // Listens on `local` (IPv4 or IPv6; port 0 picks one, see port()). The
  // address decides the device. 0, or -errno with one warning logged.
  static int listen(const sockaddr_storage& local, const VerbsOptions& options,
                    std::unique_ptr<VerbsListener>& out);

  VerbsListener(ConstructionKey, EventChannel events, CmId id, const VerbsOptions& options);
  VerbsListener(const VerbsListener&) = delete;
  VerbsListener& operator=(const VerbsListener&) = delete;

  // The rdma_cm port we listen on (host order). On RoCE and IB it is
  // rdma_cm's own port space, not a TCP port; on iWARP it is a TCP port.
  uint16_t port() const;

  // Readable (poll/epoll) when a connect request may be waiting for accept();
  // non-blocking, owned by the listener. For an owner that waits on many
  // things at once, such as the upgrade agent.
  int event_fd() const;
  // What each accepted connection is set up with.
  const VerbsOptions& options() const { return options_; }

  // Takes the next connect request, sets up the transport on the device it
  // came to, and accepts with our StreamEndpoint in the private data; returns
  // once the connection is established. 0 with `out` set, or -errno with one
  // warning logged:
  //   -ETIMEDOUT  no request, or the connection was not established, by `deadline`
  //   -EPROTO     the request carried no hello of ours (it was rejected)
  //   -ECONNRESET the peer gave up before the connection was established
  //   other       a verbs call failed (the request was rejected)
  int accept(Deadline deadline, VerbsConnection& out);

 private:
  EventChannel events_;  // declared first: outlives the id
  CmId id_;
  VerbsOptions options_;
};

}  // namespace qpsock::transport::verbs
