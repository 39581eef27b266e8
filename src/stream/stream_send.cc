// Stream::send: eager steps (records copied into the peer's ring) and, for
// large contiguous pieces of a blocking send, rendezvous (the peer pulls).
#include <sys/socket.h>

#include <cerrno>

#include "stream/stream.h"

namespace qpsock::stream {
namespace {

// The most often a writer asks its peer for room before it runs out.
constexpr std::chrono::milliseconds kEarlyRoomInterval{1};

}  // namespace

ssize_t Stream::send(std::span<const iovec> data, int flags, Blocking blocking) {
  if (data.size() == 1 && (flags & (MSG_MORE | MSG_OOB)) == 0)
    if (const std::optional<ssize_t> sent = send_single_inline_record(data[0])) return *sent;
  if ((flags & MSG_DONTWAIT) != 0) blocking = Blocking(false);
  if ((flags & MSG_OOB) != 0) return -EOPNOTSUPP;
  const bool more = (flags & MSG_MORE) != 0;
  IovecCursor source(data);
  ssize_t accepted = 0;
  // Bytes of the current piece to copy even though it is large enough for a
  // rendezvous (its registration failed).
  uint64_t copy_anyway = 0;
  // A blocking send waits for credit once, as long as it takes to ask the
  // peer's engine for room (room_patience after the stall) and as long again
  // for its answer; then what the ring has no room for goes into the send
  // backlog at once. So the peer's receive backlog fills before ours: bytes
  // there outlive our process, as TCP's in the kernel do; ours do not.
  bool waited_for_room = false;
  for (;;) {
    StateLock send_lock(send_mutex_);
    StateLock state(state_mutex_);
    // What the send backlog takes of the rest is accepted: true if any.
    auto hold = [&] {
      const size_t held = hold_in_send_backlog(state, source);
      accepted += static_cast<ssize_t>(held);
      copy_anyway -= std::min<uint64_t>(copy_anyway, held);
      return held > 0;
    };
    if (!connected_) return -ENOTCONN;
    // Take in what happened first: a peer that has closed is seen before
    // this write, not by its failing post; and a peer that left the link and
    // whose FIN has come since closed in order.
    progress_locked();
    if (broken_) settle_provisional_reset_locked();
    if (peer_closed_ && !wrote_after_peer_close_ && accepted == 0) {
      // TCP takes the first write after the peer's close, which the peer's
      // kernel answers with a reset: later writes fail EPIPE, SO_ERROR says so.
      wrote_after_peer_close_ = true;
      pending_error_ = EPIPE;
      notify_waiters_locked();
      return static_cast<ssize_t>(source.remaining());
    }
    if (peer_reader_gone_ && !broken_ && accepted == 0 && !source.done()) {
      // The peer shut down both directions: TCP's peer answers this write
      // with a reset; it is accepted, never delivered, and ends the stream
      // (after the peer's end of stream, as an orderly close: later writes EPIPE).
      break_connection_locked(ECONNRESET, "written after the peer's shutdown(SHUT_RDWR)");
      if (peer_closed_) {
        wrote_after_peer_close_ = true;
        pending_error_ = EPIPE;
      }
      return static_cast<ssize_t>(source.remaining());
    }
    if (int error = send_error_locked(accepted == 0); error < 0)
      return accepted > 0 ? accepted : error;
    if (source.done()) return all_accepted_locked(accepted, more);
    if (send_backlog_bytes_ != 0) {
      // Bytes held earlier go first, as far as the ring takes them; this
      // send's bytes go behind them.
      push_send_backlog_locked(state);
      if (send_backlog_bytes_ != 0 && !broken_) {
        if (hold()) continue;
        if (!blocking()) return accepted > 0 ? accepted : -EAGAIN;
        send_lock.unlock();
        const uint64_t held_before = send_backlog_bytes_;
        const int waited = wait_until(
            state,
            [&] {
              return can_write_locked(kSmallestDataRecord) || write_shutdown_ ||
                     send_backlog_bytes_ < held_before;
            },
            {.interruptible = true, .deadline = blocking.deadline()});
        if (waited < 0) return finish_send_locked(accepted, waited == -ETIMEDOUT ? -EAGAIN : waited);
      }
      continue;
    }
    const uint64_t eager_bytes =
        copy_anyway > 0 ? copy_anyway : bytes_before_rendezvous(source, blocking);
    if (eager_bytes == 0) {
      const ByteRange piece = source.contiguous();
      send_lock.unlock();
      state.unlock();
      // Registering can take a while: no lock is held.
      RegistrationLease lease;
      if (registrations_->acquire(piece.data, piece.length, source_access(), lease) < 0) {
        copy_anyway = piece.length;
        continue;
      }
      state.lock();
      const ssize_t sent = send_rendezvous(state, piece, lease, blocking.deadline());
      if (sent < 0) return finish_send_locked(accepted, sent);
      if (sent == 0) {
        // The peer is not reading: copy the piece, as far as the ring takes it.
        copy_anyway = piece.length;
        continue;
      }
      accepted += sent;
      source.advance(static_cast<size_t>(sent));
      continue;
    }
    if (!can_write_locked(kSmallestDataRecord)) {
      note_stall_locked();
      if ((!blocking() || waited_for_room) && hold()) continue;
      if (!blocking()) return accepted > 0 ? accepted : -EAGAIN;
      send_lock.unlock();
      // A reader that reads frees the ring soon: its bytes then go straight
      // in. The wait for credit before the backlog takes them is bounded.
      std::optional<Clock::time_point> deadline = blocking.deadline();
      bool patience_ends = false;
      if (!waited_for_room && settings_.send_backlog_limit != 0) {
        const auto patience_end = Clock::now() + 2 * settings_.room_patience;
        if (!deadline || patience_end < *deadline) {
          deadline = patience_end;
          patience_ends = true;
        }
      }
      const int waited = wait_until(
          state, [&] { return can_write_locked(kSmallestDataRecord) || write_shutdown_; },
          {.interruptible = true, .deadline = deadline});
      if (waited == -ETIMEDOUT && patience_ends) {
        waited_for_room = true;
        continue;
      }
      // SO_SNDTIMEO ran out: what was sent, or EAGAIN.
      if (waited < 0) return finish_send_locked(accepted, waited == -ETIMEDOUT ? -EAGAIN : waited);
      continue;
    }
    const ssize_t copied = send_eager_step(state, source, eager_bytes, more);
    if (copied < 0) return finish_send_locked(accepted, copied);
    accepted += copied;
    copy_anyway -= std::min<uint64_t>(copy_anyway, static_cast<uint64_t>(copied));
    // Done without another pass (its locks and progress cost a small
    // message a third of its instructions).
    if (source.done()) return all_accepted_locked(accepted, more);
  }
}

std::optional<ssize_t> Stream::send_single_inline_record(const iovec& data) {
  StateLock send_lock(send_mutex_);
  StateLock state(state_mutex_);
  if (!connected_) return -ENOTCONN;
  // As the general path does: what the peer did (a close, a reset) is seen
  // before this write, as TCP has seen it.
  progress_locked();
  // Anything unusual (an error, a shutdown, the peer's close, bytes held by
  // MSG_MORE, no room or slot now) is the general path's to handle.
  if (broken_ || write_shutdown_ || peer_closed_ || peer_reader_gone_ || unnotified_ring_bytes_ != 0 ||
      send_backlog_bytes_ != 0)
    return std::nullopt;
  const uint64_t offset = send_credit_->written();
  const uint64_t ring_bytes = eager_->single_inline_record(offset, data.iov_len);
  if (ring_bytes == 0 || !can_write_locked(ring_bytes)) return std::nullopt;
  reserve_eager_writes_locked(ring_bytes, 1, data.iov_len);
  const uint32_t immediate = announce_data_locked(ring_bytes);
  if (const int error = eager_->post_single_inline_record(
          offset, {static_cast<std::byte*>(data.iov_base), data.iov_len}, immediate);
      error < 0) {
    post_failed_locked("an eager write", error);
    return finish_send_locked(0, -EPIPE);
  }
  return static_cast<ssize_t>(data.iov_len);
}

int Stream::send_error_locked(bool report) {
  if (broken_) {
    // The pending error (ECONNRESET) is reported once, by a call that
    // returns it; a call returning a partial count leaves it for the next.
    if (report && pending_error_ != 0) return -std::exchange(pending_error_, 0);
    return -EPIPE;
  }
  return write_shutdown_ ? -EPIPE : 0;
}

ssize_t Stream::all_accepted_locked(ssize_t accepted, bool more) {
  if (!more) flush_unnotified_locked();
  return accepted;
}

ssize_t Stream::finish_send_locked(ssize_t accepted, ssize_t error) {
  if (accepted > 0) return accepted;
  if (broken_ && error == -EPIPE) return send_error_locked(true);
  return error;
}

// Whether a record of `smallest_record` bytes can go now: ring room (after a
// skipped or padded tail), two send-queue entries (padding and record), and a
// slot for the notification that announces it.
bool Stream::can_write_locked(uint64_t smallest_record) const {
  if (!window_->can_send_counted() || !send_queue_has_room_locked(2)) return false;
  const RecordPlacement placement =
      place_record(eager_->geometry(), send_credit_->written(), smallest_record);
  return send_credit_->room() >=
         placement.skipped_bytes + placement.padding_bytes + smallest_record;
}

uint64_t Stream::bytes_before_rendezvous(const IovecCursor& source, Blocking& blocking) const {
  IovecCursor walk = source;
  uint64_t before = 0;
  while (!walk.done()) {
    const ByteRange piece = walk.contiguous();
    // Non-blocking sends never wait for a peer to pull: they copy. Nor does
    // a piece that fits the free ring now: TCP would take it into its
    // buffers at once, whether or not the peer reads (two programs that both
    // write before they read rely on it).
    if (piece.length >= settings_.rendezvous_threshold && !fits_free_ring_locked(before + piece.length))
      return blocking() ? before : source.remaining();
    before += piece.length;
    walk.advance(piece.length);
  }
  return before;
}

bool Stream::fits_free_ring_locked(uint64_t payload) const {
  // Every record's header and alignment, and padding at the wrap point.
  const uint64_t records = (payload + eager_->largest_payload() - 1) / eager_->largest_payload();
  const uint64_t overhead = records * (record_size(0) + kRingUnit) + record_size(eager_->largest_payload());
  return payload + overhead <= send_credit_->room();
}

void Stream::reserve_eager_writes_locked(uint64_t ring_bytes, uint32_t posts, uint64_t payload) {
  send_credit_->on_written(ring_bytes);
  posts_outstanding_ += posts;
  unsent_payload_ += payload;
  if (send_credit_->room() < eager_->geometry().size() / 2) [[unlikely]]
    ask_for_room_early_locked();
}

void Stream::ask_for_room_early_locked() {
  if (room_asked_early_ || !room_wanted_) return;
  const auto now = Clock::now();
  if (now - early_room_asked_at_ < kEarlyRoomInterval) return;
  early_room_asked_at_ = now;
  room_asked_early_ = true;
  ring_doorbell(control_);
}

uint32_t Stream::announce_data_locked(uint64_t ring_bytes) {
  window_->on_counted_sent();
  return encode_notification(
      {NotificationKind::data_arrived, static_cast<uint32_t>(ring_bytes / kRingUnit)});
}

ssize_t Stream::send_eager_step(StateLock& state, IovecCursor& source, uint64_t most_bytes,
                                bool more) {
  WritePlan plan(send_credit_->written());
  const WriteBudget budget{send_credit_->room(),
                           transport_->send_queue_depth() - posts_outstanding_};
  eager_->plan_data(source, most_bytes, budget, plan);
  if (plan.empty()) return 0;
  if (plan.out_of_room()) plan.back().header.flags |= kRecordCreditWanted;
  // Reserve the ring space and queue entries while the lock is held.
  reserve_eager_writes_locked(plan.ring_bytes(), static_cast<uint32_t>(plan.size()),
                              plan.payload_bytes());
  // MSG_MORE on the last piece defers the announcement (bounded by half a ring).
  const uint64_t announce = unnotified_ring_bytes_ + plan.ring_bytes();
  const bool defer = more && source.done() && announce < eager_->geometry().size() / 2;
  std::optional<uint32_t> immediate;
  if (!defer) {
    immediate = announce_data_locked(announce);
    unnotified_ring_bytes_ = 0;
    unnotified_payload_ = 0;
  }
  if (plan.needs_staging()) {
    // The copy into staging is the long part; the send lock keeps the
    // reserved space ours.
    state.unlock();
    eager_->stage(plan);
    state.lock();
  }
  if (broken_) return -EPIPE;
  if (const int error = eager_->post(plan, immediate); error < 0) {
    post_failed_locked("an eager write", error);
    return -EPIPE;
  }
  if (defer) {
    // Only now may another thread's flush announce these bytes.
    unnotified_ring_bytes_ += plan.ring_bytes();
    unnotified_payload_ += plan.payload_bytes();
  }
  return static_cast<ssize_t>(plan.payload_bytes());
}

}  // namespace qpsock::stream
