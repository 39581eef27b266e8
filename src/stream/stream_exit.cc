// Stream::deliver_before_exit: what send took reaches the peer before a
// process that ends without closing takes the transport down with it.
#include <time.h>

#include <algorithm>
#include <array>

#include "stream/control_doorbell.h"
#include "stream/stream.h"

namespace qpsock::stream {

namespace {

// How long one stream waits for its state lock, and for a completion.
constexpr std::chrono::milliseconds kExitLockPatience{100};
constexpr std::chrono::milliseconds kExitQuietLimit{200};
// How often held bytes with no room ring the peer's engine for it.
constexpr std::chrono::milliseconds kExitRingInterval{5};
// Bytes the send backlog holds wait for the peer's room past the deadline,
// until this long passes with none of them taken: a TCP writer would still
// be blocked in its write, with the same room (the peer's application is
// reading other connections first).
constexpr std::chrono::seconds kHeldBytesPatience{60};

void sleep_briefly() {
  timespec pause{0, 1'000'000};
  nanosleep(&pause, nullptr);
}

}  // namespace

bool Stream::deliver_before_exit(std::chrono::steady_clock::time_point deadline, ExitCall call) {
  // try_lock: a signal handler's _exit may have interrupted this very thread
  // inside the stream (another thread never holds the lock for long). One
  // stream gets a share of the deadline, not all of it.
  const auto lock_given_up = std::min(deadline, Clock::now() + kExitLockPatience);
  StateLock state(state_mutex_, std::defer_lock);
  while (!state.try_lock()) {
    if (Clock::now() >= lock_given_up) return true;
    sleep_briefly();
  }
  if (!connected_ || closed_ || broken_) return true;
  auto delivered = [&] { return all_sent_locked(); };
  auto none_held = [&] { return send_backlog_bytes_ == 0; };
  // Held bytes need the peer's room: its engine gives it though its
  // application may not be reading.
  if (!none_held()) ring_doorbell(control_);
  // The deadline, or later while held bytes keep going.
  auto held_deadline = Clock::now() + kHeldBytesPatience;
  uint64_t held_before = send_backlog_bytes_;
  auto wait_deadline = [&] {
    if (send_backlog_bytes_ < held_before) held_deadline = Clock::now() + kHeldBytesPatience;
    held_before = send_backlog_bytes_;
    return none_held() ? deadline : std::max(deadline, held_deadline);
  };
  if (call == ExitCall::exit) {
    // What this end has read goes back too, so that the peer, seeing this
    // process leave, can tell TCP's FIN from a reset (peer_end_locked).
    return_all_credit_locked();
    for (;;) {
      const uint64_t held = send_backlog_bytes_;
      const int waited = wait_until(
          state, [&] { return delivered() || send_backlog_bytes_ < held; }, {.deadline = wait_deadline()});
      if (waited < 0 || broken_ || delivered()) return none_held();
    }
  }
  // _exit, perhaps in a signal handler that interrupted malloc or the
  // transport: only posts on a link that is up, and only what completes
  // them (poll_for_exit); a failure ends the wait without acting on it. A
  // post another thread reserved and never made (the handler interrupted its
  // copy) never completes: the wait ends once nothing has completed for
  // kExitQuietLimit.
  std::array<Completion, 16> batch;
  auto quiet_since = Clock::now();
  auto rang_at = Clock::now();
  while (transport_->link_up_for_exit()) {
    return_all_credit_locked();
    // Held bytes the peer has room for go too; no memory is freed here.
    try_push_send_backlog_locked(state, PushCaller::underscore_exit);
    // No timer asks for room here: the peer's engine is rung for it.
    if (!none_held() && !can_write_locked(kSmallestDataRecord) &&
        Clock::now() - rang_at >= kExitRingInterval) {
      rang_at = Clock::now();
      ring_doorbell(control_);
    }
    flush_unnotified_locked();
    flush_notifications_locked();
    if (broken_ || delivered()) return none_held();
    const int count = transport_->poll_for_exit(batch);
    if (count < 0) return none_held();
    for (int index = 0; index < count; ++index) {
      const Completion& completion = batch[index];
      if (completion.status != 0) return none_held();
      if (completion.kind != CompletionKind::arrived) {
        dispatch_locked(completion);
        continue;
      }
      // Slots and credit may let the last announcement go; the rest (the
      // peer's data, its rendezvous) no longer matters.
      const auto notification = decode_notification(completion.immediate);
      if (notification && (notification->kind == NotificationKind::slots_returned ||
                           notification->kind == NotificationKind::credit))
        on_notification_locked(*notification);
    }
    const auto now = Clock::now();
    if (count > 0) {
      quiet_since = now;
      continue;
    }
    const auto quiet_limit = none_held() ? std::chrono::milliseconds(kExitQuietLimit)
                                         : std::chrono::milliseconds(kHeldBytesPatience);
    if (now >= wait_deadline() || now - quiet_since >= quiet_limit) return none_held();
    // No wakeup is armed (that would touch the transport's state): a short
    // sleep, with the lock free for the other threads.
    const bool none_held_before = none_held();
    const auto lock_deadline = wait_deadline();
    state.unlock();
    sleep_briefly();
    while (!state.try_lock()) {
      if (Clock::now() >= lock_deadline) return none_held_before;
      sleep_briefly();
    }
  }
  return none_held();
}

}  // namespace qpsock::stream
