#include "readiness/epoll_set.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include "common/log.h"
#include "libc/next_symbols.h"
#include "readiness/socket_events.h"

namespace qpsock::readiness {
namespace {

// Our registrations' data: a tag no user-space pointer carries (x86-64 user
// addresses stay below 2^47), the kind, and the watch's id.
constexpr uint64_t kTagMask = 0xff00'0000'0000'0000ull;
constexpr uint64_t kTag = 0xa500'0000'0000'0000ull;
constexpr uint64_t kIdMask = 0x0000'ffff'ffff'ffffull;
enum class CookieKind : uint64_t { watch = 1, wait_handle = 2, signal = 3 };

uint64_t cookie(CookieKind kind, uint64_t id) {
  return kTag | static_cast<uint64_t>(kind) << 48 | (id & kIdMask);
}
bool is_cookie(uint64_t data) { return (data & kTagMask) == kTag; }
CookieKind cookie_kind(uint64_t data) { return static_cast<CookieKind>((data >> 48) & 0xff); }

constexpr uint32_t kReadinessBits = EPOLLIN | EPOLLPRI | EPOLLOUT | EPOLLRDNORM | EPOLLRDBAND |
                                    EPOLLWRNORM | EPOLLWRBAND | EPOLLMSG | EPOLLRDHUP;
// What the kernel watches of a converted socket's TCP connection: the token,
// a FIN, a reset, send space while our direction is not switched.
constexpr uint32_t kControlEvents = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;

int kernel_control(int epoll_fd, int operation, int fd, uint32_t events, uint64_t data) {
  epoll_event event{};
  event.events = events;
  event.data.u64 = data;
  return next::epoll_ctl(epoll_fd, operation, fd, &event);
}

using Clock = std::chrono::steady_clock;

int milliseconds_left(const std::optional<Clock::time_point>& deadline) {
  if (!deadline) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, INT32_MAX));
}

}  // namespace

EpollSet::~EpollSet() {
  for (const auto& [stream, use] : stream_users_)
    if (!use.connection->inherited_stream()) stream->remove_readiness_signal(signal_.get());
}

EpollSet::Watch* EpollSet::find_locked(int fd) {
  return fd >= 0 && static_cast<size_t>(fd) < by_fd_.size() ? by_fd_[static_cast<size_t>(fd)] : nullptr;
}

void EpollSet::index_fd_locked(int fd, Watch* watch) {
  if (fd < 0) return;
  const size_t at = static_cast<size_t>(fd);
  if (at >= by_fd_.size()) {
    if (watch == nullptr) return;
    by_fd_.resize(std::max(at + 1, by_fd_.size() * 2), nullptr);
  }
  by_fd_[at] = watch;
}

int EpollSet::add(int fd, const epoll_event& event, std::shared_ptr<upgrade::Connection> connection,
                  std::shared_ptr<EpollSet> nested) {
  // Made before the lock, so that a registration the kernel refuses lets the
  // connection go after it.
  auto watch = std::make_unique<Watch>();
  SetLock lock(*this);
  watch->id = next_id_++;
  watch->fd = fd;
  watch->events = event.events;
  watch->data = event.data;
  watch->connection = std::move(connection);
  watch->nested = std::move(nested);
  if (watch->nested != nullptr) {
    has_cookies_.store(true, std::memory_order_release);
    if (kernel_control(epoll_fd_, EPOLL_CTL_ADD, fd, event.events,
                       cookie(CookieKind::watch, watch->id)) < 0)
      return -1;
    ++nested_;
  } else {
    epoll_event as_asked = event;
    if (next::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &as_asked) < 0) return -1;
    ++pending_;
    // Upgraded already: converted now rather than at the next wait.
    if (watch->connection->stream() != nullptr) convert_locked(*watch);
  }
  watch->slot = watches_.size();
  index_fd_locked(fd, watch.get());
  if (watch->nested != nullptr) by_id_[watch->id] = watch.get();
  watches_.push_back(std::move(watch));
  watch_count_.store(watches_.size(), std::memory_order_release);
  return 0;
}

bool EpollSet::modify(int fd, const epoll_event& event, int& result) {
  SetLock lock(*this);
  Watch* watch = find_locked(fd);
  if (watch == nullptr) return false;
  if (watch->converted) {
    // MOD never takes EPOLLEXCLUSIVE, as in the kernel.
    if ((event.events & EPOLLEXCLUSIVE) != 0 || (watch->events & EPOLLEXCLUSIVE) != 0) {
      errno = EINVAL;
      result = -1;
      return true;
    }
    result = 0;
  } else if (watch->nested != nullptr) {
    result = kernel_control(epoll_fd_, EPOLL_CTL_MOD, fd, event.events,
                            cookie(CookieKind::watch, watch->id));
  } else if (watch->connection->stream() != nullptr && (event.events & EPOLLEXCLUSIVE) == 0) {
    // Upgraded meanwhile (a one-shot registration waits for this re-arm).
    watch->events = event.events;
    result = convert_locked(*watch) ? 0 : [&] {
      epoll_event as_asked = event;
      return next::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &as_asked);
    }();
  } else {
    epoll_event as_asked = event;
    result = next::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &as_asked);
  }
  if (result == 0) {
    watch->events = event.events;
    watch->data = event.data;
    watch->disabled = false;
    // The kernel looks at readiness again after MOD and reports what is ready,
    // edge-triggered or not.
    watch->reported_events = 0;
    watch->reported_activity = ~uint64_t{0};
  }
  return true;
}

bool EpollSet::remove(int fd, int& result) {
  SetLock lock(*this);
  Watch* watch = find_locked(fd);
  if (watch == nullptr) return false;
  // A converted registration is ours; unconvert takes it out.
  result = watch->converted ? 0 : next::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  erase_locked(*watch);
  return true;
}

void EpollSet::fd_closing(int fd) {
  SetLock lock(*this);
  Watch* watch = find_locked(fd);
  if (watch == nullptr) return;
  // The kernel keeps a registration while another fd holds the same socket
  // (dup), still under the closed number.
  if (watch->connection != nullptr && watch->connection->attached_fds() > 0) {
    index_fd_locked(fd, nullptr);
    watch->fd = -1;
    return;
  }
  erase_locked(*watch, true);
}

void EpollSet::erase_locked(Watch& watch, bool closing) {
  if (watch.converted) unconvert_locked(watch, closing);
  if (watch.nested != nullptr) --nested_;
  if (watch.connection != nullptr && !watch.converted) --pending_;
  index_fd_locked(watch.fd, nullptr);
  if (!by_id_.empty()) by_id_.erase(watch.id);
  // The last watch takes its place (the order of watches is no promise).
  const size_t slot = watch.slot;
  retired_.push_back(std::move(watches_[slot]));
  if (slot + 1 != watches_.size()) {
    watches_[slot] = std::move(watches_.back());
    watches_[slot]->slot = slot;
  }
  watches_.pop_back();
  watch_count_.store(watches_.size(), std::memory_order_release);
}

int EpollSet::ensure_signal_locked() {
  if (signal_registered_) return 0;
  if (signal_ == nullptr) {
    auto signal = std::make_shared<stream::ReadinessSignal>();
    if (int error = signal->open(); error < 0) return error;
    signal_ = std::move(signal);
  }
  has_cookies_.store(true, std::memory_order_release);
  if (kernel_control(epoll_fd_, EPOLL_CTL_ADD, signal_->fd(), EPOLLIN,
                     cookie(CookieKind::signal, 0)) < 0)
    return -errno;
  signal_registered_ = true;
  return 0;
}

bool EpollSet::convert_locked(Watch& watch) {
  stream::Stream* stream = watch.connection->stream();
  if (stream == nullptr || watch.fd < 0) return false;
  if (ensure_signal_locked() < 0) return false;
  StreamUse& use = stream_users_[stream];
  uint32_t& users = use.users;
  use.connection = watch.connection.get();
  if (users == 0) {
    // A stream without a wait handle is heard of through the signal alone.
    const int wait_handle = stream->transport_wait_handle();
    if (wait_handle >= 0 &&
        kernel_control(epoll_fd_, EPOLL_CTL_ADD, wait_handle, EPOLLIN | EPOLLET,
                       cookie(CookieKind::wait_handle, watch.id)) < 0 &&
        errno != EEXIST) {
      stream_users_.erase(stream);
      QPSOCK_LOG(warn, "fd %d: cannot watch its stream in epoll set %d (%s); its readiness "
                 "stays the kernel's", watch.fd, epoll_fd_, strerror(errno));
      return false;
    }
    stream->add_readiness_signal(signal_);
  }
  ++users;
  // DEL and ADD rather than MOD: MOD refuses registrations made EPOLLEXCLUSIVE.
  next::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, watch.fd, nullptr);
  kernel_control(epoll_fd_, EPOLL_CTL_ADD, watch.fd, kControlEvents,
                 cookie(CookieKind::watch, watch.id));
  watch.converted = true;
  watch.conversion = ++conversions_;
  by_id_[watch.id] = &watch;
  watch.stream = stream;
  // Whatever is ready now is news to the application.
  watch.reported_events = 0;
  watch.reported_activity = ~uint64_t{0};
  --pending_;
  ++converted_;
  return true;
}

void EpollSet::unconvert_locked(Watch& watch, bool closing) {
  const bool parents = inherited(watch);
  // A forked child's close leaves the parent's registration in the shared
  // kernel set, as the kernel does; its explicit EPOLL_CTL_DEL removes it.
  if (watch.fd >= 0 && !(parents && closing)) next::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, watch.fd, nullptr);
  auto use = stream_users_.find(watch.stream);
  if (use != stream_users_.end() && --use->second.users == 0) {
    if (!parents) {
      if (const int wait_handle = watch.stream->transport_wait_handle(); wait_handle >= 0)
        next::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, wait_handle, nullptr);
      watch.stream->remove_readiness_signal(signal_.get());
    }
    stream_users_.erase(use);
  }
  watch.converted = false;
  by_id_.erase(watch.id);
  watch.stream = nullptr;
  --converted_;
  ++pending_;
}

void EpollSet::convert_upgraded_locked() {
  // Read before looking: a stream installed meanwhile is looked for next time.
  const uint64_t installations = upgrade::stream_installations();
  if (installations == installations_seen_.load(std::memory_order_relaxed)) return;
  installations_seen_.store(installations, std::memory_order_release);
  // A socket added later whose stream is there already is converted as it is added.
  if (pending_ == 0) return;
  for (size_t index = 0; index < watches_.size();) {
    Watch& watch = *watches_[index];
    if (watch.connection == nullptr || watch.converted) {
      ++index;
      continue;
    }
    if (watch.connection->phase() == upgrade::UpgradePhase::declined) {
      // TCP for good: the application's registration is the kernel's.
      erase_locked(watch);
      continue;
    }
    // A one-shot registration may have fired in the kernel, which would not
    // tell us: it is converted when the application re-arms it.
    if ((watch.events & EPOLLONESHOT) == 0) convert_locked(watch);
    ++index;
  }
}

bool EpollSet::active() {
  SetLock lock(*this);
  // A nested set is registered with a cookie: its events need translating.
  return pending_ + converted_ + nested_ > 0;
}

uint32_t EpollSet::current_events_locked(Watch& watch, stream::Stream::Progress progress) {
  if (watch.nested != nullptr) {
    watch.control_revents = 0;
    // Ready when a wait on it would report something: one of its streams, or
    // one of the registrations the kernel answers for.
    const bool ready = watch.nested->prepare_outer_sleep();
    watch.nested->finish_outer_sleep();
    pollfd kernel{watch.fd, POLLIN, 0};
    if (ready || (watch.fd >= 0 && next::poll(&kernel, 1, 0) == 1 && (kernel.revents & POLLIN) != 0))
      return EPOLLIN;
    return 0;
  }
  upgrade::Connection& connection = *watch.connection;
  // The parent's stream: unusable here (every call fails with ECONNRESET).
  if (inherited(watch)) return EPOLLERR | EPOLLHUP;
  if (watch.control_revents != 0 && connection.receiving_switched())
    watch.stream->on_control_event(watch.control_revents);
  watch.control_revents = 0;
  short kernel = 0;
  if (!connection.receiving_switched() || !connection.sending_switched()) {
    pollfd tcp{watch.fd, POLLIN | POLLPRI | POLLOUT | POLLRDHUP, 0};
    if (watch.fd >= 0 && next::poll(&tcp, 1, 0) == 1) kernel = tcp.revents;
  }
  return static_cast<uint16_t>(
      upgraded_socket_events(connection, watch.fd, kernel, progress, switched_while_looking_));
}

int EpollSet::collect_locked(epoll_event* events, int capacity, uint64_t round,
                             stream::Stream::Progress progress, uint64_t converted_by) {
  int count = 0;
  for (const auto& owned : watches_) {
    if (count >= capacity) break;
    Watch& watch = *owned;
    if (!watch.converted && watch.nested == nullptr) continue;
    if (watch.disabled || watch.reported_round == round || watch.conversion > converted_by) continue;
    // A TCP edge is news for a watched direction still on TCP; a switched
    // one's segments are the token, doorbells and the end, which the stream
    // tells.
    const bool kernel_spoke =
        watch.control_revents != 0 &&
        (watch.connection == nullptr || !watch.connection->receiving_switched() ||
         ((watch.events & EPOLLOUT) != 0 && !watch.connection->sending_switched()));
    const uint32_t wanted = (watch.events & kReadinessBits) | EPOLLHUP | EPOLLERR;
    const uint32_t report = current_events_locked(watch, progress) & wanted;
    if ((watch.events & EPOLLET) != 0) {
      // An edge: new readiness, or the stream moved since the last report.
      const uint64_t activity = watch.stream != nullptr && !inherited(watch) ? watch.stream->activity() : 0;
      const bool fresh = (report & ~watch.reported_events) != 0 ||
                         activity != watch.reported_activity || kernel_spoke;
      watch.reported_events = report;
      watch.reported_activity = activity;
      if (!fresh) continue;
    }
    if (report == 0) continue;
    events[count].events = report;
    events[count].data = watch.data;
    ++count;
    watch.reported_round = round;
    if ((watch.events & EPOLLONESHOT) != 0) watch.disabled = true;
  }
  return count;
}

void EpollSet::arm_locked() {
  if (signal_ != nullptr) signal_->add_sleeper();
  for (const auto& [stream, use] : stream_users_) {
    // A broken stream changes no more: it has nothing to arm; the parent's
    // (in a forked child) is not ours to arm.
    if (!use.connection->inherited_stream() && !stream->broken()) stream->arm_for_readiness();
  }
  for (const auto& watch : watches_)
    if (watch->nested != nullptr) watch->nested->prepare_outer_sleep();
}

void EpollSet::disarm_locked() {
  if (signal_ != nullptr) signal_->remove_sleeper();
  for (const auto& watch : watches_)
    if (watch->nested != nullptr) watch->nested->finish_outer_sleep();
}

void EpollSet::take_kernel_event_locked(const epoll_event& event) {
  switch (cookie_kind(event.data.u64)) {
    case CookieKind::signal:
      if (signal_ != nullptr) signal_->drain();
      break;
    case CookieKind::wait_handle:
      break;  // the collect that follows looks at every stream
    case CookieKind::watch: {
      const auto found = by_id_.find(event.data.u64 & kIdMask);
      // Nested sets have no control socket; a nonzero value still marks the edge.
      if (found != by_id_.end()) found->second->control_revents = static_cast<short>(event.events | EPOLLIN);
      break;
    }
  }
}

int EpollSet::wait(epoll_event* events, int capacity, const timespec* timeout,
                   const sigset_t* mask) {
  if (events == nullptr || capacity <= 0)
    return next::epoll_pwait(epoll_fd_, events, capacity, 0, mask);  // the kernel's EINVAL/EFAULT
  std::optional<Clock::time_point> deadline;
  if (timeout != nullptr)
    deadline = Clock::now() + std::chrono::seconds(timeout->tv_sec) +
               std::chrono::nanoseconds(timeout->tv_nsec);
  if (!translates_now()) {
    // Nothing of ours in the set, or only sockets not upgraded, registered
    // as the application asked: the kernel's wait, unless a thread converted
    // something meanwhile.
    const int polled = next::epoll_pwait(epoll_fd_, events, capacity, milliseconds_left(deadline), mask);
    if (polled <= 0 || !needs_us()) return polled;
    if (const int kept = take_cookies(events, polled); kept > 0) return kept;
    if (deadline && Clock::now() >= *deadline) return 0;
  }
  for (;;) {
    int count = 0;
    int kernel_timeout = 0;
    bool armed = false;
    uint64_t round = 0;
    uint64_t converted_before_wait = 0;
    {
      SetLock lock(*this);
      round = ++rounds_;
      // Converted only here, before arming and the kernel's wait: a socket
      // converted after the wait could be in the kernel's answer under the
      // application's own registration and then once more in ours (two
      // events for one fd in one call, which the kernel never gives); one
      // converted after the arm would sleep unarmed.
      convert_upgraded_locked();
      count = collect_locked(events, capacity, round);
      if (count == 0) {
        // Arm, then look again: a change after the arm wakes the sleep, one
        // before it is in what we look at.
        armed = true;
        switched_while_looking_ = false;
        arm_locked();
        count = collect_locked(events, capacity, round, stream::Stream::Progress::none);
        // A direction that switched in the look made its stream progress
        // after the arm: look again, armed anew, rather than sleep.
        if (count == 0 && !switched_while_looking_) kernel_timeout = milliseconds_left(deadline);
      }
      converted_before_wait = conversions_;
    }
    int polled = 0;
    int wait_error = 0;
    if (count < capacity) {
      polled = next::epoll_pwait(epoll_fd_, events + count, capacity - count, kernel_timeout, mask);
      if (polled < 0) wait_error = errno;
    }
    SetLock lock(*this);
    if (armed) disarm_locked();
    if (polled < 0) {
      if (count > 0) return count;
      errno = wait_error;
      return -1;
    }
    int kept = count;
    bool ours = false;
    for (int index = count; index < count + polled; ++index) {
      if (is_cookie(events[index].data.u64)) {
        take_kernel_event_locked(events[index]);
        ours = true;
      } else {
        events[kept++] = events[index];
      }
    }
    if (ours && kept < capacity)
      kept += collect_locked(events + kept, capacity - kept, round, stream::Stream::Progress::make,
                             converted_before_wait);
    if (kept > 0) return kept;
    if (deadline && Clock::now() >= *deadline) return 0;
  }
}

int EpollSet::take_cookies(epoll_event* events, int count) {
  bool ours = false;
  for (int index = 0; index < count && !ours; ++index) ours = is_cookie(events[index].data.u64);
  if (!ours) return count;
  SetLock lock(*this);
  int kept = 0;
  for (int index = 0; index < count; ++index) {
    if (is_cookie(events[index].data.u64)) {
      take_kernel_event_locked(events[index]);
    } else {
      events[kept++] = events[index];
    }
  }
  // What the cookies stood for is reported by the next wait (0: the caller
  // waits again at once): a watch converted during this wait, by another
  // thread, may be in the kernel's answer under its own registration too.
  return kept;
}

bool EpollSet::prepare_outer_sleep() {
  SetLock lock(*this);
  convert_upgraded_locked();
  // Armed before looking, as in wait(); a direction that switched in the
  // look spent the arm: the outer wait must not sleep on it.
  switched_while_looking_ = false;
  arm_locked();
  bool ready = false;
  for (const auto& watch : watches_) {
    if (!watch->converted && watch->nested == nullptr) continue;
    if (watch->disabled) continue;
    const uint32_t wanted = (watch->events & kReadinessBits) | EPOLLHUP | EPOLLERR;
    const uint32_t now = current_events_locked(*watch, stream::Stream::Progress::none) & wanted;
    if (now == 0) continue;
    if ((watch->events & EPOLLET) != 0 && (now & ~watch->reported_events) == 0 &&
        watch->stream != nullptr && watch->stream->activity() == watch->reported_activity)
      continue;
    ready = true;
  }
  return ready || switched_while_looking_;
}

void EpollSet::finish_outer_sleep() {
  SetLock lock(*this);
  disarm_locked();
}

}  // namespace qpsock::readiness
