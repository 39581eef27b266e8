// The send backlog: what our application wrote that the peer's ring has no
// room for yet, taken at once as TCP's send buffer takes it (tcp_sendmsg
// queues, tcp_push sends as the window opens), and moved into the ring as
// the peer's credit comes, by whichever thread of ours sees it first.
#include <array>

#include "stream/control_doorbell.h"
#include "stream/stream.h"

namespace qpsock::stream {
namespace {

// How many chunks one step of a push sends from.
constexpr size_t kPushVectors = 16;

}  // namespace

size_t Stream::hold_in_send_backlog(StateLock& state, IovecCursor& source) {
  const uint64_t limit = settings_.send_backlog_limit;
  if (limit <= send_backlog_bytes_ || source.done() || broken_) return 0;
  const uint64_t wanted = std::min<uint64_t>(source.remaining(), limit - send_backlog_bytes_);
  const uint64_t reserved = send_backlog_.reserve(wanted, settings_.backlog_process_limit);
  if (reserved == 0) return 0;  // the process holds all it may: wait, as TCP does under tcp_mem
  // The backlog is the send lock's: the copy needs no state lock.
  state.unlock();
  send_backlog_.append_copy(source, static_cast<size_t>(reserved));
  state.lock();
  send_backlog_bytes_ += reserved;
  // Credit may have come meanwhile: push now; else the peer is asked.
  push_send_backlog_locked(state);
  return static_cast<size_t>(reserved);
}

void Stream::push_send_backlog_locked(StateLock& state, PushCaller caller) {
  bool pushed = false;
  while (send_backlog_bytes_ != 0 && !broken_ && can_write_locked(kSmallestDataRecord)) {
    std::array<iovec, kPushVectors> vectors;
    const size_t count = send_backlog_.front(vectors);
    IovecCursor source({vectors.data(), count});
    const ssize_t copied = send_eager_step(state, source, source.remaining(), false);
    if (copied <= 0) break;
    send_backlog_.drop(static_cast<uint64_t>(copied), caller == PushCaller::thread);
    send_backlog_bytes_ -= static_cast<uint64_t>(copied);
    pushed = true;
  }
  if (send_backlog_bytes_ != 0 && !broken_ && !can_write_locked(kSmallestDataRecord)) {
    if (caller == PushCaller::thread) note_stall_locked();
    request_room_locked();
  }
  // The last held byte went (after it, in order): the peer may read our
  // process's end as orderly again.
  if (send_backlog_bytes_ == 0 && (peer_told_held_ || held_notice_)) held_notice_ = 0;
  if (pushed) {
    backlog_retry_ = settings_.room_patience;
    // An end of stream held behind the backlog may go now.
    flush_notifications_locked();
    notify_waiters_locked();
  }
}

uint64_t Stream::push_all_held_locked(StateLock& state) {
  auto patience_end = Clock::now() + settings_.close_flush_timeout;
  while (send_backlog_bytes_ != 0 && !broken_) {
    const uint64_t held = send_backlog_bytes_;
    push_send_backlog_locked(state);
    if (send_backlog_bytes_ == 0 || broken_) break;
    if (send_backlog_bytes_ < held) patience_end = Clock::now() + settings_.close_flush_timeout;
    // Another thread's push wakes it too (try_push_send_backlog_locked
    // fails while we hold the send lock, so none moves them meanwhile).
    if (wait_until(state, [&] { return can_write_locked(kSmallestDataRecord); },
                   {.deadline = patience_end}) < 0)
      break;
  }
  return send_backlog_bytes_;
}

void Stream::try_push_send_backlog_locked(StateLock& state, PushCaller caller) {
  if (send_backlog_bytes_ == 0 || broken_ || !can_write_locked(kSmallestDataRecord)) return;
  // The state lock is held, so only a try (the order is send, then state).
  StateLock send_lock(send_mutex_, std::try_to_lock);
  if (send_lock.owns_lock()) push_send_backlog_locked(state, caller);
}

void Stream::request_room_locked() {
  if (room_requested_) return;
  room_requested_ = true;
  held_notice_ = 1;
  flush_notifications_locked();
}

void Stream::on_room_wanted_locked(uint32_t held) {
  peer_holds_bytes_ = held != 0;
  if (held == 0) return;
  doorbell_on_credit_ = true;
  receive_credit_.on_consumed(0, true);
  // Everything announced was consumed: its credit goes now (and rings), or
  // went already and the peer has not looked: ring now. Otherwise the next
  // credit rings, once our application or engine takes the ring's bytes.
  if (receive_credit_.consumed() != notified_) return;
  return_all_credit_locked();
  if (doorbell_on_credit_ && receive_credit_.unreturned() == 0) ring_for_room_locked();
}

void Stream::ring_for_room_locked() {
  if (!doorbells_allowed_ || !credit_doorbells_allowed_) return;
  doorbell_on_credit_ = false;
  ring_doorbell(control_);
}

bool Stream::send_backlog_writable_locked() const {
  // As TCP's sk_stream_is_writeable: a third of the buffer free.
  return settings_.send_backlog_limit != 0 &&
         send_backlog_bytes_ * 3 <= settings_.send_backlog_limit * 2;
}

}  // namespace qpsock::stream
