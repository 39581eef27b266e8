// Stream::deliver_before_exit: what send took reaches the peer before a
// process that ends without closing takes the transport down with it.
#include <time.h>

#include <algorithm>
#include <array>

#include "stream/stream.h"

namespace qpsock::stream {

namespace {

// How long one stream waits for its state lock, and for a completion.
constexpr std::chrono::milliseconds kExitLockPatience{100};
constexpr std::chrono::milliseconds kExitQuietLimit{200};

void sleep_briefly() {
  timespec pause{0, 1'000'000};
  nanosleep(&pause, nullptr);
}

}  // namespace

void Stream::deliver_before_exit(std::chrono::steady_clock::time_point deadline, ExitCall call) {
  // try_lock: a signal handler's _exit may have interrupted this very thread
  // inside the stream (another thread never holds the lock for long). One
  // stream gets a share of the deadline, not all of it.
  const auto lock_given_up = std::min(deadline, Clock::now() + kExitLockPatience);
  StateLock state(state_mutex_, std::defer_lock);
  while (!state.try_lock()) {
    if (Clock::now() >= lock_given_up) return;
    sleep_briefly();
  }
  if (!connected_ || closed_ || broken_) return;
  auto delivered = [&] { return all_sent_locked(); };
  if (call == ExitCall::exit) {
    // What this end has read goes back too, so that the peer, seeing this
    // process leave, can tell TCP's FIN from a reset (peer_end_locked).
    return_all_credit_locked();
    wait_until(state, delivered, {.deadline = deadline});
    return;
  }
  // _exit, perhaps in a signal handler that interrupted malloc or the
  // transport: only posts on a link that is up, and only what completes
  // them (poll_for_exit); a failure ends the wait without acting on it. A
  // post another thread reserved and never made (the handler interrupted its
  // copy) never completes: the wait ends once nothing has completed for
  // kExitQuietLimit.
  std::array<Completion, 16> batch;
  auto quiet_since = Clock::now();
  while (transport_->link_up_for_exit()) {
    return_all_credit_locked();
    flush_unnotified_locked();
    flush_notifications_locked();
    if (broken_ || delivered()) return;
    const int count = transport_->poll_for_exit(batch);
    if (count < 0) return;
    for (int index = 0; index < count; ++index) {
      const Completion& completion = batch[index];
      if (completion.status != 0) return;
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
    if (now >= deadline || now - quiet_since >= kExitQuietLimit) return;
    // No wakeup is armed (that would touch the transport's state): a short
    // sleep, with the lock free for the other threads.
    state.unlock();
    sleep_briefly();
    while (!state.try_lock()) {
      if (Clock::now() >= deadline) return;
      sleep_briefly();
    }
  }
}

}  // namespace qpsock::stream
