// Waiting for rdma_cm events, bounded by a deadline, on an event channel
// whose fd is non-blocking: the setup steps of the connector and the
// listener, each synchronous on its own channel.
#pragma once

#include <chrono>

#include "transport/verbs/verbs_handles.h"

namespace qpsock::transport::verbs {

using Deadline = std::chrono::steady_clock::time_point;

// O_NONBLOCK on `fd` (an event or completion channel's): 0 or -errno.
int make_nonblocking(int fd);

// An event channel with a non-blocking fd (close-on-exec, as librdmacm opens
// it): 0 or -errno (-ELIBACC: the RDMA libraries cannot be loaded). Every
// listener, connector and connection starts with one.
int create_event_channel(EventChannel& channel);

// Whole milliseconds until `deadline`, at least 1 while it is ahead, 0 once
// it passed (for the rdma_resolve_* timeouts and poll(2)).
int milliseconds_until(Deadline deadline);

// The next event on `channel`: 0, -ETIMEDOUT once `deadline` passed, or
// -errno.
int next_cm_event(rdma_event_channel* channel, Deadline deadline, CmEvent& event);

// The next event, which should be `expected` with status 0. Anything else is
// the reason setup failed, as -errno: rdma_cm's own status when it gives one
// (address, route and connect errors, unreachable), -ECONNREFUSED for a
// reject, -ECONNRESET for a disconnect, -ENODEV for a removed device,
// -EPROTO for an event that makes no sense here. `event` holds the event
// either way (when there was one), for its private data or a log line.
int expect_cm_event(rdma_event_channel* channel, rdma_cm_event_type expected, Deadline deadline,
                    CmEvent& event);

}  // namespace qpsock::transport::verbs
