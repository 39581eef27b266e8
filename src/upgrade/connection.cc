#include "upgrade/connection.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/log.h"
#include "libc/next_symbols.h"
#include "stream/control_doorbell.h"
#include "upgrade/connection_registry.h"
#include "upgrade/doorbell_watcher.h"
#include "upgrade/forked_children.h"
#include "upgrade/random_token.h"
#include "upgrade/socket_upgrade.h"

namespace qpsock::upgrade {

namespace {
std::atomic<uint64_t> next_serial{1};
}  // namespace

Connection::Connection(config::Role role)
    : role_(role), serial_(next_serial.fetch_add(1, std::memory_order_relaxed)) {}

Connection::~Connection() = default;

bool Connection::begin_negotiation() {
  UpgradePhase expected = UpgradePhase::offered;
  // Sequentially consistent, as the fork counts are: a fork counted after
  // forked_since_claimed looked copies a phase that is no longer offered.
  if (!phase_.compare_exchange_strong(expected, UpgradePhase::negotiating, std::memory_order_seq_cst))
    return false;
  // Only now: a connection that never negotiates costs no getrandom. The
  // readers of the token come after the install, which publishes it.
  fill_random_token(expected_token_);
  return true;
}

bool Connection::claim_server_attempt() {
  // The fork counts before the claim: a fork that copies the claim into its
  // child was under way then, or begins after this look (fork_counts).
  const ForkCounts before = fork_counts();
  if (server_attempt_claimed_.exchange(true, std::memory_order_seq_cst)) return false;
  // Stored by the one claim that won: its attempt is made later by this thread's job.
  forks_at_claim_.store(before.fork_under_way() ? kForkedWhileClaiming : before.begun,
                        std::memory_order_seq_cst);
  return true;
}

void Connection::count_offered_tcp_bytes(int fd, ssize_t bytes) {
  if (bytes <= 0 || phase() != UpgradePhase::offered) return;
  const auto moved = static_cast<uint64_t>(bytes);
  const uint64_t before = offered_tcp_bytes_.fetch_add(moved, std::memory_order_relaxed);
  moved_over_tcp_while_offered(fd, *this, before, before + moved);
}

void Connection::defer_claim(std::chrono::steady_clock::time_point claimed_at) {
  // Never 0 (the steady clock starts at boot, long before).
  deferred_claim_at_.store(std::max<std::chrono::steady_clock::rep>(1, claimed_at.time_since_epoch().count()),
                           std::memory_order_release);
}

std::optional<std::chrono::steady_clock::time_point> Connection::take_deferred_claim(
    std::chrono::steady_clock::time_point due_if_claimed_by) {
  auto claimed = deferred_claim_at_.load(std::memory_order_acquire);
  if (claimed == 0 || claimed > due_if_claimed_by.time_since_epoch().count() ||
      !deferred_claim_at_.compare_exchange_strong(claimed, 0, std::memory_order_acq_rel))
    return std::nullopt;
  return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(claimed));
}

bool Connection::forked_since_claimed() const {
  if (!server_attempt_claimed_.load(std::memory_order_seq_cst)) return false;
  const uint64_t at_claim = forks_at_claim_.load(std::memory_order_seq_cst);
  return at_claim == kForkedWhileClaiming || fork_counts().begun != at_claim;
}

void Connection::decline(const char* reason) {
  UpgradePhase current = phase_.load(std::memory_order_acquire);
  while (current == UpgradePhase::offered || current == UpgradePhase::negotiating) {
    if (phase_.compare_exchange_weak(current, UpgradePhase::declined, std::memory_order_acq_rel)) {
      record_decline(reason);
      return;
    }
  }
}

bool Connection::decline_if_offered(const char* reason) {
  UpgradePhase expected = UpgradePhase::offered;
  if (!phase_.compare_exchange_strong(expected, UpgradePhase::declined, std::memory_order_acq_rel))
    return false;
  record_decline(reason);
  return true;
}

void Connection::record_decline(const char* reason) {
  decline_reason_.store(reason, std::memory_order_release);
  report_path();
}

void Connection::attach_statistics(stats::Handle handle) {
  statistics_.store(handle, std::memory_order_release);
  report_path();
}

void Connection::count_zero_copy(stats::Direction direction, uint64_t total) {
  std::atomic<uint64_t>& counted = zero_copy_counted_[static_cast<int>(direction)];
  uint64_t before = counted.load(std::memory_order_relaxed);
  while (total > before) {
    if (counted.compare_exchange_weak(before, total, std::memory_order_relaxed)) {
      stats::add_zero_copy(statistics_.load(std::memory_order_acquire), direction, total - before);
      return;
    }
  }
}

void Connection::report_path() {
  const stats::Handle handle = statistics_.load(std::memory_order_acquire);
  if (handle == 0) return;
  switch (phase()) {
    case UpgradePhase::offered:
    case UpgradePhase::negotiating:
      return;  // still pending, as recorded
    case UpgradePhase::established:
      if (stream_given_up_.load(std::memory_order_acquire)) {
        stats::set_path(handle, stats::Path::kernel, decline_reason_.load(std::memory_order_acquire));
        return;
      }
      stats::set_path(handle, offloaded_path_,
                      offloaded_path_ == stats::Path::rdma ? "upgraded to RDMA"
                                                           : "upgraded to shared memory");
      return;
    case UpgradePhase::declined: {
      const char* reason = decline_reason_.load(std::memory_order_acquire);
      stats::set_path(handle, stats::Path::kernel, reason != nullptr ? reason : "upgrade declined");
      return;
    }
  }
}

namespace {
std::atomic<uint64_t> installed_streams{0};
}  // namespace

uint64_t stream_installations() { return installed_streams.load(std::memory_order_acquire); }

void Connection::install(std::unique_ptr<stream::Stream> stream, const BindingToken& peer_token,
                         KeptFd tcp, stats::Path path) {
  peer_token_ = peer_token;
  offloaded_path_ = path;
  stream::Stream* raw = stream.get();
  stream_ = std::move(stream);
  // After the switch the TCP connection carries nothing but the token,
  // doorbells (stream/control_doorbell.h) and the FIN or RST of a closing or
  // dying peer: the stream learns of those here.
  control_.store(tcp, std::memory_order_release);
  raw->set_room_wanted_handler([this, raw] { schedule_room_request(raw->room_patience()); });
  raw->set_end_sent_handler([this] { send_deferred_fin(); });
  raw->set_control_channel(tcp, [this, raw](short revents) {
    if (!receiving_switched()) return stream::ControlVerdict::stop_watching;
    // The application closed every number of the socket: what was polled
    // may be another file's now (common/kept_fd.h). A number moves before
    // the old one is fenced, so an ended number that is still the current
    // one means no number is left; one that moved is looked at again.
    for (KeptFd current = control(); !still_kept(current); current = control()) {
      if (control() == current) return stream::ControlVerdict::stop_watching;
    }
    if ((revents & POLLERR) != 0) return stream::ControlVerdict::connection_lost;
    int error = 0;
    switch (remember_tcp_error(stream::take_doorbells(control(), &error), error)) {
      case stream::ControlState::quiet:
        return stream::ControlVerdict::keep_waiting;
      case stream::ControlState::end_of_file:
        // EOF after the stream's own end: an orderly close.
        if ((raw->readiness() & POLLRDHUP) != 0) return stream::ControlVerdict::stop_watching;
        // Over RDMA the FIN can overtake the stream's last writes: a peer's
        // shutdown(SHUT_WR) posts its end of stream and sends the FIN at
        // once, and the queue pair may still be sending what came before.
        // A peer that is really gone is reported by the queue pair and the
        // rdma_cm (its process's end disconnects them), so the stream waits
        // for one or the other. Over shared memory the end of stream is in
        // place before the FIN leaves, and EOF first means the peer is gone.
        if (offloaded_path_ == stats::Path::rdma) return stream::ControlVerdict::stop_watching;
        return stream::ControlVerdict::connection_lost;
      case stream::ControlState::gone:
        break;
    }
    return stream::ControlVerdict::connection_lost;
  }, [this] {
    int error = 0;
    const stream::ControlState state = stream::read_control_state(
        control(),
        receiving_switched() ? stream::DoorbellsPossible::yes : stream::DoorbellsPossible::no, &error);
    return remember_tcp_error(state, error);
  });
  // SO_RCVLOWAT set before the upgrade; later changes come through setsockopt.
  if (const FdUse use(tcp); use) copy_receive_low_water(use.fd(), *raw);
  stream_installed_.store(raw, std::memory_order_release);
  phase_.store(UpgradePhase::established, std::memory_order_release);
  // The peer may ring before our application reads up to its token: a
  // writer that waits for room in our ring (Stream::answer_peer).
  watch_for_doorbells(tcp);
  installed_streams.fetch_add(1, std::memory_order_acq_rel);
  report_path();
  // Renumbered while the handshake ran (control_fd_left found no stream then).
  if (!still_kept(tcp) || find_connection(tcp.fd).get() != this) control_fd_left(tcp.fd);
}

stream::ControlState Connection::remember_tcp_error(stream::ControlState state, int error) {
  if (state == stream::ControlState::gone) {
    // What ended it, as the application would have read it: a timeout, or
    // (a reset, a byte that is not a doorbell, anything else) a reset.
    const int kept = error == ETIMEDOUT || error == ECONNABORTED ? error : ECONNRESET;
    int none = 0;
    tcp_error_seen_.compare_exchange_strong(none, kept, std::memory_order_acq_rel);
  }
  return tcp_error_seen_.load(std::memory_order_acquire) != 0 ? stream::ControlState::gone : state;
}

void Connection::application_saw_tcp_error(int error) {
  // Only the errors that end a connection: an ICMP report (EHOSTUNREACH
  // with IP_RECVERR) leaves it running, and a bad argument is the call's.
  if (error != ECONNRESET && error != ETIMEDOUT && error != ECONNABORTED) return;
  int none = 0;
  tcp_error_seen_.compare_exchange_strong(none, error, std::memory_order_acq_rel);
  tcp_error_reported_.store(true, std::memory_order_release);
}

int Connection::take_remembered_tcp_error() {
  const int error = tcp_error_seen_.load(std::memory_order_acquire);
  if (error == 0 || tcp_error_reported_.exchange(true, std::memory_order_acq_rel)) return 0;
  return error;
}

void Connection::send_deferred_fin() {
  if (const FdUse use(control()); use) next::shutdown(use.fd(), SHUT_WR);
}

void Connection::answer_doorbell() {
  stream::Stream* current = stream();
  if (current == nullptr) return;
  // As a blocking wait would: the handler takes the doorbells (or finds the
  // peer gone), then progress answers what the peer sent. Before our
  // receiving direction switched, the TCP bytes (the peer's last ones, its
  // token, the doorbells behind it) are the application's to read first:
  // the stream still answers, and takes the peer's bytes for the
  // application if it is not reading (a peer that waits for room).
  if (receiving_switched()) current->on_control_event(POLLIN);
  current->answer_peer();
}

void Connection::control_fd_left(int fd) {
  stream::Stream* current = stream();
  if (current == nullptr) return;
  // One move at a time, the new fd chosen under the lock: two fds closed at
  // once must leave the connection and the stream on one that stays.
  std::lock_guard lock(control_move_mutex_);
  if (control().fd != fd) return;
  for (;;) {
    const int other_fd = attached_fd(this, -1, fd);
    if (other_fd < 0) return;
    // Kept before it is looked at again: a close of that number that has
    // not detached it yet ends this keep when it fences (common/kept_fd.h).
    const KeptFd other = keep_fd(other_fd);
    if (attached_fd(this, other_fd, fd) != other_fd) continue;  // closed meanwhile
    control_.store(other, std::memory_order_release);
    current->move_control_channel(other);
    // The watcher found the connection by the old number.
    if (receiving_switched()) watch_for_doorbells(other);
    return;
  }
}

void Connection::receive_low_water_changed(int tcp_fd) {
  if (stream::Stream* current = stream()) copy_receive_low_water(tcp_fd, *current);
}

void Connection::copy_receive_low_water(int tcp_fd, stream::Stream& stream) {
  // Read back from the kernel, which clamps what was set.
  int low_water = 1;
  socklen_t length = sizeof(low_water);
  if (next::getsockopt(tcp_fd, SOL_SOCKET, SO_RCVLOWAT, &low_water, &length) == 0)
    stream.set_receive_low_water(static_cast<size_t>(std::max(low_water, 1)));
}

int Connection::install_announced(std::unique_ptr<stream::Stream> stream, KeptFd tcp,
                                  stats::Path path) {
  // Set before the stream is published: a reader that sees the stream sees these.
  hellos_left_.store(2, std::memory_order_relaxed);
  peer_hello_awaited_.store(true, std::memory_order_relaxed);
  install(std::move(stream), BindingToken{}, tcp, path);
  Hello ours{};
  ours.magic = kHelloMagic;
  ours.version = kProtocolVersion;
  ours.pid = getpid();
  ours.accepted = 1;
  ours.token = expected_token_;
  iovec piece{&ours, sizeof(ours)};
  // A fresh stream always has room for it: never waits.
  const ssize_t sent = this->stream()->send({&piece, 1}, 0, stream::Blocking(false));
  if (sent != static_cast<ssize_t>(sizeof(ours))) {
    give_up_unswitched_stream("the stream failed before the switch");
    return sent < 0 ? static_cast<int>(sent) : -EIO;
  }
  hello_done();
  return 0;
}

void Connection::hello_done() {
  if (hellos_left_.fetch_sub(1, std::memory_order_acq_rel) == 1) allow_send_switch();
}

bool Connection::take_peer_hello_locked(stream::Stream& current) {
  // Asked first: a stream breaks only after taking in every arrival that
  // came before its failure, and takes in none after, so if it was broken
  // before this look, what the look finds is all the peer ever sent.
  const bool broken = current.broken();
  if (current.readable_bytes() < sizeof(Hello)) {
    // The peer's Hello precedes anything it could switch (and its switch
    // waits for its header's write to land here), so a stream broken with
    // no Hello in it never carried a byte of the peer's: TCP has them all.
    if (broken) {
      QPSOCK_LOG(info, "fd %d: the peer gave up the RDMA upgrade before the switch (its end of "
                 "the queue pair went before its Hello came); stays on TCP", control().fd);
      give_up_unswitched_stream("the peer gave up the RDMA upgrade before the switch");
    }
    return false;
  }
  Hello hello{};
  iovec piece{&hello, sizeof(hello)};
  const ssize_t got = current.receive({&piece, 1}, MSG_DONTWAIT, false);
  if (got != static_cast<ssize_t>(sizeof(hello)) || hello.magic != kHelloMagic ||
      hello.version != kProtocolVersion || hello.accepted != 1) {
    // Only a broken or foreign peer sends this; it never gets our token
    // written into TCP, and its stream never reaches the application.
    QPSOCK_LOG(error, "upgraded stream: a malformed hello from the peer; abandoning the stream");
    current.abort();
    peer_hello_awaited_.store(false, std::memory_order_release);
    return false;
  }
  peer_token_ = hello.token;
  peer_hello_awaited_.store(false, std::memory_order_release);
  // The hello is ours, not the application's: the peer learns at once that
  // it was read, so that only the application's bytes can ever count as
  // unread (a process that ends with none unread closes in order, as TCP).
  current.return_credit_now();
  hello_done();
  return true;
}

void Connection::give_up_unswitched_stream(const char* reason) {
  decline_reason_.store(reason, std::memory_order_release);
  stream_given_up_.store(true, std::memory_order_release);
  // Writers stop looking for a Hello that will never come.
  peer_hello_awaited_.store(false, std::memory_order_release);
  report_path();
  // The peer loses its queue pair at once (it may still think it upgraded).
  if (stream::Stream* current = stream()) current->abort();
}

void Connection::look_for_peer_hello() {
  std::lock_guard lock(receive_mutex_);
  learn_switch_point_locked();
}

int Connection::readable_bytes(int fd, int& bytes) {
  if (inherited_stream()) return -refuse_inherited_call(fd);
  std::unique_lock lock(receive_mutex_);
  int tcp_bytes = 0;
  if (next::ioctl(fd, FIONREAD, &tcp_bytes) != 0) return -errno;
  if (!receiving_switched()) {
    // Token bytes already in the kernel are not the application's.
    learn_switch_point_locked();
    if (switch_point_ >= 0) {
      const uint64_t left = static_cast<uint64_t>(switch_point_) - tcp_received_;
      if (static_cast<uint64_t>(tcp_bytes) > left) tcp_bytes = static_cast<int>(left);
    }
    bytes = tcp_bytes;
    return 0;
  }
  bytes = static_cast<int>(stream()->readable_bytes());
  return 0;
}

int Connection::unsent_bytes(int fd, int& bytes) {
  if (inherited_stream()) return -refuse_inherited_call(fd);
  if (sending_switched()) {
    bytes = static_cast<int>(stream()->unsent_bytes());
    return 0;
  }
  return next::ioctl(fd, SIOCOUTQ, &bytes) == 0 ? 0 : -errno;
}

int Connection::take_error(int fd, int& error) {
  if (stream::Stream* current = stream(); current != nullptr && switched()) {
    error = current->take_error();
    if (error != 0) {
      application_saw_tcp_error(error);
      // The kernel's socket, now only the control channel, may hold the same
      // event (the peer's reset reaches it too): reported once, as TCP does.
      int kernel_error = 0;
      socklen_t length = sizeof(kernel_error);
      next::getsockopt(fd, SOL_SOCKET, SO_ERROR, &kernel_error, &length);
      return 0;
    }
  }
  socklen_t length = sizeof(error);
  if (next::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) return -errno;
  if (error != 0) application_saw_tcp_error(error);
  // Before the switch, the control channel may have taken the kernel's report.
  else if (!switched()) error = take_remembered_tcp_error();
  return 0;
}

int Connection::shutdown(int fd, int how) {
  // The kernel's half-close would reach the parent's peer as its end.
  if (inherited_stream()) {
    errno = refuse_inherited_call(fd);
    return -1;
  }
  stream::Stream* current = stream();
  if (current != nullptr) {
    const bool fin_later =
        (how == SHUT_WR || how == SHUT_RDWR) && sending_switched() && current->shutdown_write() > 0;
    if ((how == SHUT_RD || how == SHUT_RDWR) && receiving_switched()) current->shutdown_read();
    // The stream's end of stream waits for held bytes: the FIN, which the
    // peer's control channel reads as our end, goes after it
    // (send_deferred_fin), as TCP's follows its send buffer.
    if (fin_later) return how == SHUT_RDWR ? next::shutdown(fd, SHUT_RD) : 0;
  }
  // The kernel's half-close too: before the switch it is the real one, after
  // it the FIN tells the peer's control channel that we ended in order.
  return next::shutdown(fd, how);
}

void Connection::abandon_inherited_stream() {
  // stream_, not stream(): the fork may have come between the two stores of
  // install() (the child is single-threaded: nothing moves under us).
  if (stream_ != nullptr) {
    // Deliberately never destroyed in this process (see the header).
    static_cast<void>(stream_.release());
  } else if (phase() == UpgradePhase::offered) {
    if (!server_attempt_claimed_.load(std::memory_order_seq_cst))
      return;  // on TCP, or to be upgraded by whichever process makes the first I/O
    // The parent's, which declines it (forked_since_claimed). No thread of this process
    // may try it, and the child may be sandboxed (sshd's privilege
    // separation forks its network child right after the first exchange).
    decline("the process that forked this one had claimed its upgrade");
    return;
  } else if (phase() != UpgradePhase::negotiating) {
    return;  // on TCP for good
  }
  stream_installed_.store(nullptr, std::memory_order_release);
  mark_inherited_stream();
}

int Connection::refuse_inherited_call(int fd) {
  // No getppid() for the line: the child may run under a seccomp filter that
  // kills on it (sshd's network child does).
  if (!inherited_call_logged_.exchange(true, std::memory_order_acq_rel))
    QPSOCK_LOG(error, "fd %d: this connection's stream belongs to the process that upgraded it "
               "before forking this one (or by its parent); it cannot be used here yet: "
               "ECONNRESET (a kernel rule for its port in qpsock.conf keeps such a program's "
               "connections on TCP)", fd);
  return ECONNRESET;
}

bool Connection::close_stream() {
  stream::Stream* current = stream();
  if (current == nullptr) return false;
  // Before the peer's SwitchHeader the stream holds only qpsock's own bytes
  // (its Hello, the header): none of them is the application's unread data.
  bool application_bytes_possible = receiving_switched();
  if (!application_bytes_possible) {
    std::lock_guard lock(receive_mutex_);
    learn_switch_point_locked();
    application_bytes_possible = switch_point_ >= 0;
  }
  const stream::CloseResult result = current->close();
  if (result.error != 0) QPSOCK_LOG(debug, "closing an upgraded stream: %d", result.error);
  if (result.lost_bytes > 0) {
    QPSOCK_LOG(warn, "closing an upgraded connection with %llu written bytes its peer gave no "
               "room for within close_flush_timeout: resetting it, so the peer sees a reset, "
               "not an end after a part", static_cast<unsigned long long>(result.lost_bytes));
    return true;
  }
  return application_bytes_possible && result.unread_bytes > 0;
}

void Connection::take_own_bytes_before_close(int fd) {
  if (stream() == nullptr) return;
  if (!receiving_switched()) {
    std::lock_guard lock(receive_mutex_);
    learn_switch_point_locked();
    // The token follows the application's last TCP byte: only once all of
    // those were read is it next.
    if (switch_point_ < 0 || tcp_received_ != static_cast<uint64_t>(switch_point_)) return;
    if (take_token_locked(fd) <= 0) return;
  }
  stream::take_doorbells(keep_fd(fd));
}

void Connection::take_doorbells_before_exit(int fd) {
  if (stream() != nullptr && receiving_switched()) stream::take_doorbells(keep_fd(fd));
}

}  // namespace qpsock::upgrade
