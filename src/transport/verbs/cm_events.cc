#include "transport/verbs/cm_events.h"

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>

#include "common/own_descriptor.h"
#include "libc/next_symbols.h"
#include "transport/verbs/verbs_library.h"

namespace qpsock::transport::verbs {

int make_nonblocking(int fd) {
  const int flags = next::fcntl(fd, F_GETFL);
  if (flags < 0 || next::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return -errno;
  return 0;
}

int create_event_channel(EventChannel& channel) {
  // Every connection begins here: nothing reaches the libraries unloaded.
  if (!verbs_library_loaded()) return -ELIBACC;
  EventChannel created(verbs_library().rdma_create_event_channel());
  if (created == nullptr) return errno != 0 ? -errno : -ENODEV;
  if (int error = place_own_descriptor(created->fd); error < 0) return error;
  if (int error = make_nonblocking(created->fd); error < 0) return error;
  channel = std::move(created);
  return 0;
}

int milliseconds_until(Deadline deadline) {
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left <= Deadline::duration::zero()) return 0;
  const auto milliseconds = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(milliseconds, 1 << 30));
}

int next_cm_event(rdma_event_channel* channel, Deadline deadline, CmEvent& event) {
  for (;;) {
    rdma_cm_event* raw = nullptr;
    if (verbs_library().rdma_get_cm_event(channel, &raw) == 0) {
      event.reset(raw);
      return 0;
    }
    if (errno != EAGAIN && errno != EINTR) return errno != 0 ? -errno : -EIO;
    const int wait = milliseconds_until(deadline);
    if (wait == 0) return -ETIMEDOUT;
    pollfd readable{channel->fd, POLLIN, 0};
    if (next::poll(&readable, 1, wait) < 0 && errno != EINTR) return -errno;
  }
}

int expect_cm_event(rdma_event_channel* channel, rdma_cm_event_type expected, Deadline deadline,
                    CmEvent& event) {
  if (int error = next_cm_event(channel, deadline, event); error < 0) return error;
  if (event->event == expected && event->status == 0) return 0;
  switch (event->event) {
    case RDMA_CM_EVENT_REJECTED:
      // Its status is the CM's reject reason, not an errno.
      return -ECONNREFUSED;
    case RDMA_CM_EVENT_DISCONNECTED:
      return -ECONNRESET;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return -ENODEV;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
      return event->status < 0 ? event->status : -EHOSTUNREACH;
    default:
      return event->status < 0 ? event->status : -EPROTO;
  }
}

}  // namespace qpsock::transport::verbs
