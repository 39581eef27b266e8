#include "readiness/upgraded_poll.h"

#include <cerrno>
#include <chrono>
#include <memory>
#include <vector>

#include "common/log.h"
#include "libc/next_symbols.h"
#include "readiness/socket_events.h"
#include "readiness/upgraded_epoll.h"
#include "stream/thread_waker.h"
#include "upgrade/connection_registry.h"

namespace qpsock::readiness {
namespace {

using Clock = std::chrono::steady_clock;

struct Watched {
  nfds_t index;  // in the application's array
  std::shared_ptr<upgrade::Connection> connection;  // an upgraded socket, or
  std::shared_ptr<EpollSet> epoll_set;              // an epoll set holding some
  // In a forked child, a socket whose stream the parent upgraded: the kernel
  // socket will never be readable, so it is reported failed at once (as epoll
  // does), and the program's next call on it meets ECONNRESET rather than a
  // wait that never ends.
  bool parents_stream = false;

  // A stream of ours to arm, watch and wake on.
  bool has_stream() const { return connection != nullptr && !parents_stream; }
  // Where its transport's wait handle is in the kernel's set.
  size_t wait_handle_slot = 0;
};

// The entries whose readiness the kernel cannot tell.
std::vector<Watched> upgraded_entries(const pollfd* fds, nfds_t count) {
  std::vector<Watched> watched;
  for (nfds_t index = 0; index < count; ++index) {
    if (fds[index].fd < 0) continue;
    std::shared_ptr<upgrade::Connection> connection = upgrade::find_connection(fds[index].fd);
    if (connection != nullptr && connection->inherited_stream()) {
      watched.push_back({index, std::move(connection), nullptr, true});
    } else if (connection != nullptr && connection->stream() != nullptr) {
      watched.push_back({index, std::move(connection), nullptr});
    } else if (connection == nullptr) {
      if (auto set = active_epoll_set(fds[index].fd)) watched.push_back({index, nullptr, std::move(set)});
    }
  }
  return watched;
}

// The application's revents for a watched entry, given the kernel's.
short merged_events(const Watched& entry, int fd, short wanted, short kernel, bool set_ready,
                    bool& switched) {
  if (entry.epoll_set != nullptr) {
    const short events = static_cast<short>(kernel | (set_ready ? POLLIN : 0));
    return static_cast<short>(events & (wanted | POLLHUP | POLLERR | POLLNVAL));
  }
  if (entry.parents_stream) return POLLERR | POLLHUP;
  // The streams were armed before this look: it must not spend the arm.
  const short events = upgraded_socket_events(*entry.connection, fd, kernel,
                                              stream::Stream::Progress::none, switched);
  return static_cast<short>(events & (wanted | POLLHUP | POLLERR));
}

// Fills the application's revents from the kernel's and the streams'; how
// many entries have any. `switched`: a receiving direction switched in the
// look (the arm is spent: look again, armed anew, before sleeping).
int gather(pollfd* fds, nfds_t count, const std::vector<pollfd>& kernel_set,
           const std::vector<Watched>& watched, const std::vector<bool>& set_ready,
           bool& switched) {
  int ready = 0;
  size_t next_watched = 0;
  for (nfds_t index = 0; index < count; ++index) {
    short events = kernel_set[index].revents;
    if (next_watched < watched.size() && watched[next_watched].index == index) {
      events = merged_events(watched[next_watched], fds[index].fd, fds[index].events, events,
                             set_ready[next_watched], switched);
      ++next_watched;
    }
    fds[index].revents = events;
    if (events != 0) ++ready;
  }
  return ready;
}

int remaining_timeout(const std::optional<Clock::time_point>& deadline, timespec& storage,
                      const timespec*& timeout) {
  if (!deadline) {
    timeout = nullptr;
    return 0;
  }
  const auto left = std::max(Clock::duration::zero(), *deadline - Clock::now());
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(left);
  storage.tv_sec = seconds.count();
  storage.tv_nsec = std::chrono::duration_cast<std::chrono::nanoseconds>(left - seconds).count();
  timeout = &storage;
  return 0;
}

}  // namespace

bool poll_upgraded(pollfd* fds, nfds_t count, const timespec* timeout, const sigset_t* mask,
                   int& result) {
  if (!upgrade::any_connections() || fds == nullptr) return false;
  std::vector<Watched> watched = upgraded_entries(fds, count);
  if (watched.empty()) return false;

  std::optional<Clock::time_point> deadline;
  if (timeout != nullptr)
    deadline = Clock::now() + std::chrono::seconds(timeout->tv_sec) +
               std::chrono::nanoseconds(timeout->tv_nsec);
  // The application's fds, then this thread's waker, then each stream's
  // wait handle (-1, which poll skips, for a transport without one: it
  // writes the waker instead).
  stream::ThreadSleep thread_sleep;
  stream::ThreadWaker* const waker = thread_sleep.waker();
  std::vector<pollfd> kernel_set(fds, fds + count);
  kernel_set.push_back({thread_sleep.fd(), POLLIN, 0});
  for (Watched& entry : watched) {
    if (entry.epoll_set != nullptr) {
      kernel_set[entry.index].events |= POLLIN;  // the set's own fd wakes on its streams
      continue;
    }
    if (!entry.has_stream()) continue;
    entry.wait_handle_slot = kernel_set.size();
    kernel_set.push_back({entry.connection->stream()->transport_wait_handle(), POLLIN, 0});
  }
  // Arm every stream, then look (without sleeping); only then sleep. A
  // completion after the arm wakes the sleep; one before it is in what we
  // looked at. (Sleeping right after an arm that found progress, or spinning
  // on it, would either miss readiness or burn a core while the other
  // direction is busy.)
  for (;;) {
    // What the kernel watches of a TCP socket is what the stream cannot tell.
    // Until the receiving direction switches, the token arriving in TCP is
    // what wakes a reader; after it, TCP's POLLIN means only the peer's FIN
    // (the stream reports the end itself). A switched sending direction's
    // room is the stream's: TCP's POLLOUT, always set, would never let us
    // sleep.
    for (const Watched& entry : watched) {
      if (!entry.has_stream()) continue;
      // A broken stream is not armed, so its wait handle, once readable
      // (the error state's completions), would stay so and end every sleep
      // at once: left out (its end shows on the socket, or in the stream's
      // readiness once a direction has switched).
      stream::Stream& stream = *entry.connection->stream();
      kernel_set[entry.wait_handle_slot].fd = stream.broken() ? -1 : stream.transport_wait_handle();
      short& events = kernel_set[entry.index].events;
      events = fds[entry.index].events;
      if (!entry.connection->receiving_switched()) events |= POLLIN;
      else events &= ~(POLLIN | POLLRDNORM | POLLRDHUP);
      if (entry.connection->sending_switched()) events &= ~(POLLOUT | POLLWRNORM);
    }
    // Counted as a sleeper from before the arm: another thread's progress
    // that consumes a wakeup meant for us then signals our waker.
    for (const Watched& entry : watched)
      if (entry.has_stream()) entry.connection->stream()->begin_readiness_sleep(waker);
    std::vector<bool> set_ready(watched.size(), false);
    for (size_t entry = 0; entry < watched.size(); ++entry) {
      if (watched[entry].epoll_set != nullptr) {
        set_ready[entry] = watched[entry].epoll_set->prepare_outer_sleep();
      } else if (watched[entry].has_stream()) {
        watched[entry].connection->stream()->arm_for_readiness(waker);
      }
    }
    bool any_set_ready = false;
    for (bool ready_set : set_ready) any_set_ready |= ready_set;
    int ready = 0;
    bool failed = false;
    for (const bool sleep : {false, true}) {
      if (sleep && any_set_ready) break;
      const timespec zero{0, 0};
      timespec left_storage;
      const timespec* left = nullptr;
      remaining_timeout(deadline, left_storage, left);
      const int polled = next::ppoll(kernel_set.data(), kernel_set.size(),
                                     sleep ? thread_sleep.bounded(left) : &zero, mask);
      if (polled < 0) {
        failed = true;
        break;
      }
      bool switched = false;
      ready = gather(fds, count, kernel_set, watched, set_ready, switched);
      if (ready > 0 || (deadline && Clock::now() >= *deadline)) break;
      if (switched) break;  // armed anew by the next round, then slept on
    }
    const int poll_error = errno;
    for (const Watched& entry : watched) {
      if (entry.epoll_set != nullptr) entry.epoll_set->finish_outer_sleep();
      if (entry.has_stream()) entry.connection->stream()->end_readiness_sleep(waker);
    }
    thread_sleep.consume();
    if (failed) {
      errno = poll_error;
      result = -1;
      return true;
    }
    if (ready > 0 || (deadline && Clock::now() >= *deadline)) {
      result = ready;
      return true;
    }
  }
}

bool select_upgraded(int count, fd_set* read_set, fd_set* write_set, fd_set* error_set,
                     const timespec* timeout, const sigset_t* mask, int& result) {
  if (!upgrade::any_connections() || count <= 0) return false;
  std::vector<pollfd> fds;
  for (int fd = 0; fd < count && fd < FD_SETSIZE; ++fd) {
    short events = 0;
    if (read_set != nullptr && FD_ISSET(fd, read_set)) events |= POLLIN;
    if (write_set != nullptr && FD_ISSET(fd, write_set)) events |= POLLOUT;
    if (error_set != nullptr && FD_ISSET(fd, error_set)) events |= POLLPRI;
    if (events != 0) fds.push_back({fd, events, 0});
  }
  int polled = 0;
  if (!poll_upgraded(fds.data(), fds.size(), timeout, mask, polled)) return false;
  if (polled < 0) {
    result = -1;
    return true;
  }
  if (read_set != nullptr) FD_ZERO(read_set);
  if (write_set != nullptr) FD_ZERO(write_set);
  if (error_set != nullptr) FD_ZERO(error_set);
  int bits = 0;
  for (const pollfd& entry : fds) {
    // select's view of poll's bits, as the kernel maps them.
    if (read_set != nullptr && (entry.events & POLLIN) && (entry.revents & (POLLIN | POLLHUP | POLLERR))) {
      FD_SET(entry.fd, read_set);
      ++bits;
    }
    if (write_set != nullptr && (entry.events & POLLOUT) && (entry.revents & (POLLOUT | POLLERR))) {
      FD_SET(entry.fd, write_set);
      ++bits;
    }
    if (error_set != nullptr && (entry.events & POLLPRI) && (entry.revents & POLLPRI)) {
      FD_SET(entry.fd, error_set);
      ++bits;
    }
  }
  result = bits;
  return true;
}

}  // namespace qpsock::readiness
