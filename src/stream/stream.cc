// Stream: creation, connection, and the calls that only read or flip state.
// Sending, receiving, pulling, progress and waiting live in stream_*.cc.
#include "stream/stream.h"

#include <algorithm>
#include <cerrno>

#include "common/log.h"

namespace qpsock::stream {

namespace {

// Ring byte counts travel as 28-bit counts of 8-byte units.
constexpr uint64_t kLargestRingSize = uint64_t{1} << 30;

// The longest ask_peer_for_room waits before it looks at held bytes again.
constexpr std::chrono::seconds kLongestBacklogRetry{1};

bool settings_valid(const StreamSettings& settings) {
  return RingGeometry::valid_size(settings.ring_size) && settings.ring_size <= kLargestRingSize &&
         settings.eager_chunk > 0 && settings.rendezvous_threshold > 0 &&
         settings.bounce_size > 0;
}

bool transport_usable(const Transport& transport) {
  return transport.notification_capacity() >= kSmallestNotificationCapacity &&
         transport.max_slices() >= kMinimumSlicesPerPost &&
         transport.send_queue_depth() >= 4 && transport.max_outstanding_reads() >= 1;
}

}  // namespace

int Stream::create(std::unique_ptr<Transport> transport, const StreamSettings& settings,
                   std::shared_ptr<RegistrationProvider> registrations,
                   std::unique_ptr<Stream>& stream) {
  if (transport == nullptr || !settings_valid(settings) || !transport_usable(*transport))
    return -EINVAL;
  auto created = std::make_unique<Stream>(ConstructionKey{}, std::move(transport), settings,
                                         std::move(registrations));
  // Writing a rendezvous, the peer asks for its bytes in the box after our ring.
  const uint64_t request_box = settings.rendezvous_method == RendezvousMethod::write ? kRequestBoxSize : 0;
  if (int error = created->transport_->map_receive_ring(settings.ring_size + request_box,
                                                        created->ring_);
      error < 0)
    return error;
  if (int error = created->transport_->register_memory(created->ring_.data(), created->ring_.size(),
                                                       MemoryAccess::remote_write,
                                                       created->ring_registration_);
      error < 0)
    return error;
  stream = std::move(created);
  return 0;
}

Stream::Stream(ConstructionKey, std::unique_ptr<Transport> transport, const StreamSettings& settings,
               std::shared_ptr<RegistrationProvider> registrations)
    : transport_(std::move(transport)), settings_(settings),
      registrations_(registrations ? std::move(registrations)
                                   : std::make_shared<DirectRegistrationProvider>(*transport_)),
      ring_geometry_(settings.ring_size), receive_credit_(settings.ring_size),
      spin_budget_(settings.spin_time, settings.spin_limit),
      core_sharing_(transport_->peer_may_share_core()) {
  transport_->set_wakeup_listener(this);
}

// No call of the listener may reach a stream whose members are going.
Stream::~Stream() { transport_->set_wakeup_listener(nullptr); }

void Stream::transport_signalled() {
  std::lock_guard state(state_mutex_);
  wake_waiters_locked();
}

StreamEndpoint Stream::local_endpoint() const {
  return StreamEndpoint{reinterpret_cast<uint64_t>(ring_.data()), ring_registration_->remote_key(),
                        settings_.ring_size, transport_->notification_capacity()};
}

int Stream::connect(const StreamEndpoint& peer) {
  std::lock_guard state(state_mutex_);
  if (connected_) return -EISCONN;
  if (!RingGeometry::valid_size(peer.ring_size) || peer.ring_size > kLargestRingSize ||
      peer.notification_capacity < kSmallestNotificationCapacity)
    return -EINVAL;
  // SO_SNDBUF narrows the window below the peer's ring (never under 16 KiB,
  // so that records stay a useful size).
  constexpr uint64_t kSmallestSendWindow = uint64_t{16} << 10;
  uint64_t window = peer.ring_size;
  if (settings_.send_window != 0)
    window = std::clamp(settings_.send_window, std::min(kSmallestSendWindow, peer.ring_size), peer.ring_size);
  const uint64_t largest_payload = std::min(settings_.eager_chunk, window / 4);
  eager_.emplace(*transport_, RemoteRegion{peer.ring_address, peer.ring_key}, peer.ring_size,
                 largest_payload);
  if (int error = eager_->prepare(); error < 0) {
    eager_.reset();
    return error;
  }
  if (writes_rendezvous()) {
    if (int error = request_outbox_.map(kRequestBoxSize); error < 0) return error;
    if (int error = transport_->register_memory(request_outbox_.data(), request_outbox_.size(),
                                                MemoryAccess::local_only,
                                                request_outbox_registration_);
        error < 0)
      return error;
    peer_request_box_ = RemoteRegion{peer.ring_address + peer.ring_size, peer.ring_key};
  }
  send_credit_.emplace(window);
  window_.emplace(peer.notification_capacity, transport_->notification_capacity());
  connected_ = true;
  return 0;
}

void Stream::set_control_channel(KeptFd control, ControlEventHandler handler,
                                 ControlProbe probe) {
  std::lock_guard state(state_mutex_);
  control_ = control;
  control_handler_ = std::move(handler);
  control_probe_ = std::move(probe);
  watching_control_ = !control.empty() && control_handler_ != nullptr;
}

void Stream::move_control_channel(KeptFd control) {
  std::lock_guard state(state_mutex_);
  control_ = control;
}

void Stream::allow_doorbells() {
  std::lock_guard state(state_mutex_);
  doorbells_allowed_ = true;
  // A credit went while we could not ring: the peer may not have seen it.
  if (doorbell_on_credit_ && receive_credit_.unreturned() == 0) ring_for_room_locked();
}

void Stream::allow_credit_doorbells() {
  std::lock_guard state(state_mutex_);
  credit_doorbells_allowed_ = true;
  if (doorbell_on_credit_ && receive_credit_.unreturned() == 0) ring_for_room_locked();
}

void Stream::answer_peer() {
  // A reader or writer that is in does its part itself: never wait for it.
  StateLock send_lock(send_mutex_, std::try_to_lock);
  StateLock receive_lock(receive_mutex_, std::try_to_lock);
  StateLock state(state_mutex_);
  if (!connected_) return;
  progress_locked();
  if (receive_lock.owns_lock()) take_into_backlog_locked(state);
  if (send_lock.owns_lock()) push_send_backlog_locked(state);
}

void Stream::set_room_wanted_handler(RoomWantedHandler handler) {
  std::lock_guard state(state_mutex_);
  room_wanted_ = std::move(handler);
}

void Stream::note_stall_locked() {
  if (stalled_since_ || broken_ || !room_wanted_) return;
  stalled_since_ = Clock::now();
  room_asked_ = false;
  room_wanted_();
}

std::optional<std::chrono::microseconds> Stream::ask_peer_for_room() {
  StateLock send_lock(send_mutex_, std::try_to_lock);
  StateLock state(state_mutex_);
  if (!connected_) return std::nullopt;
  progress_locked();  // credit that came meanwhile ends the stall
  if (send_lock.owns_lock()) push_send_backlog_locked(state);
  std::optional<std::chrono::microseconds> again;
  if (send_backlog_bytes_ != 0 && !broken_) {
    // Bytes held for a peer that gives no room: looked at again, less often
    // each time (a doorbell or a writer's call pushes them sooner).
    backlog_retry_ = std::clamp(2 * backlog_retry_, settings_.room_patience,
                                std::chrono::microseconds{kLongestBacklogRetry});
    again = backlog_retry_;
  }
  if (!stalled_since_ || room_asked_ || broken_ || write_shutdown_) return again;
  const auto due = *stalled_since_ + settings_.room_patience;
  if (const auto now = Clock::now(); now < due)
    return std::chrono::ceil<std::chrono::microseconds>(due - now);
  room_asked_ = true;
  QPSOCK_LOG(debug, "stream: no room in the peer's ring for %lld ms: asking its engine for room",
             static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        Clock::now() - *stalled_since_)
                                        .count()));
  ring_doorbell(control_);
  return again;
}

size_t Stream::readable_bytes() {
  std::lock_guard state(state_mutex_);
  if (!connected_) return 0;
  progress_locked();
  return readable_bytes_;
}

size_t Stream::unsent_bytes() {
  std::lock_guard state(state_mutex_);
  if (!connected_) return 0;
  progress_locked();
  return unsent_payload_ + unnotified_payload_ + rendezvous_out_.bytes_in_flight() + send_backlog_bytes_;
}

uint64_t Stream::send_backlog_bytes() {
  std::lock_guard state(state_mutex_);
  return send_backlog_bytes_;
}

void Stream::return_credit_now() {
  std::lock_guard state(state_mutex_);
  return_all_credit_locked();
}

bool Stream::holds_corked_bytes() {
  std::lock_guard state(state_mutex_);
  return unnotified_ring_bytes_ != 0 && !broken_;
}

bool Stream::announce_corked_bytes() {
  std::lock_guard state(state_mutex_);
  if (!connected_) return false;
  progress_locked();
  flush_unnotified_locked();
  return unnotified_ring_bytes_ != 0 && !broken_;
}

int Stream::arm_transport_locked(ThreadWaker* waker) {
  const bool sole = waker != nullptr && wake_.lists_only(waker) && readiness_signals_.empty();
  return transport_->arm_for_sleeper(sole ? waker->fd() : -1);
}

bool Stream::arm_for_readiness(ThreadWaker* waker) {
  StateLock state(state_mutex_);
  if (!connected_ || broken_) return true;
  bool moved = false;
  for (;;) {
    flush_unnotified_locked();
    moved |= progress_locked();
    try_push_send_backlog_locked(state);
    return_all_credit_locked();
    if (arm_transport_locked(waker) < 0) {
      break_connection_locked(ECONNRESET, "arming the transport's wakeup failed");
      return true;
    }
    if (!progress_locked()) return moved;
    // A completion raced the arm and may have spent it: arm again.
    moved = true;
  }
}

void Stream::notify_waiters_locked() {
  ++activity_;
  wake_waiters_locked();
}

void Stream::wake_waiters_locked() {
  wake_.notify();
  for (const auto& signal : readiness_signals_) signal->notify();
}

void Stream::add_readiness_signal(std::shared_ptr<ReadinessSignal> signal) {
  std::lock_guard state(state_mutex_);
  readiness_signals_.push_back(std::move(signal));
}

void Stream::remove_readiness_signal(const ReadinessSignal* signal) {
  std::lock_guard state(state_mutex_);
  for (auto it = readiness_signals_.begin(); it != readiness_signals_.end(); ++it) {
    if (it->get() == signal) {
      readiness_signals_.erase(it);
      return;
    }
  }
}

void Stream::begin_readiness_sleep(ThreadWaker* waker) {
  std::lock_guard state(state_mutex_);
  wake_.add_sleeper(waker);
}

void Stream::end_readiness_sleep(ThreadWaker* waker) {
  std::lock_guard state(state_mutex_);
  wake_.remove_sleeper(waker);
}

uint64_t Stream::activity() {
  std::lock_guard state(state_mutex_);
  return activity_;
}

void Stream::on_control_event(short revents) {
  {
    std::lock_guard state(state_mutex_);
    if (!watching_control_) return;
  }
  // The handler looks at the stream itself: called without the lock, as the
  // blocking waits call it.
  const ControlVerdict verdict = control_handler_(revents);
  std::lock_guard state(state_mutex_);
  act_on_control_verdict_locked(verdict);
}

void Stream::act_on_control_verdict_locked(ControlVerdict verdict) {
  if (verdict == ControlVerdict::stop_watching) watching_control_ = false;
  if (verdict == ControlVerdict::connection_lost) {
    // What the peer sent before it went is taken in first, as TCP delivers
    // what it had queued before a reset: a broken stream ignores arrivals.
    progress_locked();
    break_connection_locked(ECONNRESET, "the TCP connection says the peer is gone");
  }
}

short Stream::readiness(Progress progress) {
  StateLock state(state_mutex_);
  if (!connected_) return 0;
  if (progress == Progress::make) {
    flush_unnotified_locked();
    progress_locked();
    try_push_send_backlog_locked(state);
  }
  // A peer that left the link may yet send its FIN: until it comes (or the
  // grace ends) the socket reads as readable, and a read says EAGAIN; a
  // waiter wakes again when the FIN makes the TCP socket readable.
  if (broken_ && settle_provisional_reset_locked())
    return POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM;
  short events = 0;
  const bool read_closed = eof_received_ || read_shutdown_ || broken_;
  if (read_closed) events |= POLLIN | POLLRDNORM | POLLRDHUP;
  if (readable_bytes_ >= receive_low_water_) events |= POLLIN | POLLRDNORM;
  const bool reset = broken_ && (!peer_closed_ || wrote_after_peer_close_);
  if (reset || (read_closed && write_shutdown_)) events |= POLLHUP;
  // Writable like TCP's low-water mark: a quarter of the peer's ring is free
  // (and nothing held before it), or the send backlog has room, so a write
  // that is told so always makes progress.
  const bool ring_writable = send_backlog_bytes_ == 0 && can_write_locked(kSmallestDataRecord) &&
                             send_credit_->room() >= eager_->geometry().size() / 4;
  // A waiter for POLLOUT, or bytes held, may wait for the peer's room.
  if (!ring_writable && !write_shutdown_) note_stall_locked();
  if (broken_ || write_shutdown_ || ring_writable || send_backlog_writable_locked())
    events |= POLLOUT | POLLWRNORM;
  if (pending_error_ != 0) events |= POLLERR;
  return events;
}

void Stream::set_receive_low_water(size_t bytes) {
  std::lock_guard state(state_mutex_);
  receive_low_water_ = std::max<size_t>(bytes, 1);
  // A reader waiting for more may now have enough.
  notify_waiters_locked();
}

int Stream::shutdown_read() {
  std::lock_guard state(state_mutex_);
  if (!connected_) return -ENOTCONN;
  // What arrived before the shutdown is counted before it (it stays readable).
  if (!broken_) progress_locked();
  if (!read_shutdown_ && write_shutdown_ && !broken_) {
    reader_gone_pending_ = true;
    flush_notifications_locked();
  }
  read_shutdown_ = true;
  notify_waiters_locked();
  return 0;
}

int Stream::shutdown_write() {
  StateLock send_lock(send_mutex_);
  StateLock state(state_mutex_);
  if (!connected_) return -ENOTCONN;
  // Again (Java's close shuts down output again): the FIN still waits.
  if (write_shutdown_) return end_sent_wanted_ && !broken_ ? 1 : 0;
  write_shutdown_ = true;
  if (!broken_) {
    end_of_stream_pending_ = true;
    reader_gone_pending_ = read_shutdown_;
    flush_unnotified_locked();
    flush_notifications_locked();
  }
  notify_waiters_locked();
  if (!end_of_stream_pending_ || broken_) return 0;
  end_sent_wanted_ = true;
  return 1;
}

void Stream::set_end_sent_handler(EndSentHandler handler) {
  std::lock_guard state(state_mutex_);
  end_sent_ = std::move(handler);
}

CloseResult Stream::close() {
  StateLock send_lock(send_mutex_);
  StateLock state(state_mutex_);
  if (closed_) return {0, 0, 0};
  int error = 0;
  uint64_t lost = 0;
  // Unread data: TCP resets rather than closes, and so do we (no end of
  // stream: the peer then sees a reset, not an orderly close).
  const bool resetting = connected_ && readable_bytes_ > 0;
  if (connected_ && !broken_ && !resetting) {
    if (!write_shutdown_) {
      write_shutdown_ = true;
      end_of_stream_pending_ = true;
    }
    lost = push_all_held_locked(state);
    flush_unnotified_locked();
    flush_notifications_locked();
    send_lock.unlock();
    // Our last writes must land before the transport goes: wait for their
    // completions (the hardware's, not the peer application's).
    auto flushed = [&] { return all_sent_locked() || lost != 0; };
    const int waited =
        wait_until(state, flushed, {.deadline = Clock::now() + settings_.close_flush_timeout});
    if (lost != 0) error = -ETIMEDOUT;
    else if (waited < 0) error = waited;
    // A peer that closed first breaks the stream too; only lost writes are an error.
    else if (broken_ && !flushed()) error = -ECONNRESET;
  }
  const size_t unread = connected_ ? readable_bytes_ : 0;
  closed_ = true;
  broken_ = true;
  transport_->disconnect();
  notify_waiters_locked();
  QPSOCK_LOG(debug, "stream closed: %zu bytes unread, error %d", unread, error);
  return {unread, error, lost};
}

void Stream::abort() {
  std::lock_guard state(state_mutex_);
  break_connection_locked(0, "aborted");
}

int Stream::take_error() {
  std::lock_guard state(state_mutex_);
  if (broken_ && settle_provisional_reset_locked()) return 0;
  const int error = pending_error_;
  pending_error_ = 0;
  return error;
}

uint32_t Stream::notifications_in_flight() {
  std::lock_guard state(state_mutex_);
  return window_ ? window_->counted_in_flight() : 0;
}

RendezvousCounts Stream::rendezvous_counts() {
  std::lock_guard state(state_mutex_);
  RendezvousCounts counts = rendezvous_counts_;
  counts.bytes_sent = rendezvous_bytes_sent();
  counts.bytes_received = rendezvous_bytes_received();
  return counts;
}

bool Stream::broken() {
  std::lock_guard state(state_mutex_);
  return broken_;
}

}  // namespace qpsock::stream
