// Stream::deliver_before_exit: what send took reaches the peer before a
// process that ends without closing takes the transport down with it.
#include <poll.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <utility>

#include "libc/next_symbols.h"
#include "stream/stream.h"

namespace qpsock::stream {

namespace {

void sleep_briefly() {
  timespec pause{0, 1'000'000};
  nanosleep(&pause, nullptr);
}

}  // namespace

void Stream::deliver_before_exit(std::chrono::steady_clock::time_point deadline, ExitCall call) {
  // try_lock: a signal handler's _exit may have interrupted this very thread
  // inside the stream (another thread never holds the lock for long).
  StateLock state(state_mutex_, std::defer_lock);
  while (!state.try_lock()) {
    if (Clock::now() >= deadline) return;
    sleep_briefly();
  }
  if (!connected_ || closed_ || broken_) return;
  auto delivered = [&] {
    return posts_outstanding_ == 0 && unnotified_ring_bytes_ == 0 && !end_of_stream_pending_;
  };
  // What this end has read goes back too, so that the peer, seeing this
  // process leave, can tell TCP's FIN from a reset (peer_end_locked).
  return_all_credit_locked();
  if (call == ExitCall::exit) {
    wait_until(state, delivered, {.deadline = deadline});
    return;
  }
  // _exit, perhaps in a signal handler: no allocation, no upcall. Only what
  // completes our posts and frees slots and credit for the last ones is
  // acted on; the rest (the peer's data, its rendezvous) no longer matters.
  std::array<Completion, 16> batch;
  bool armed = false;
  while (!broken_) {
    flush_unnotified_locked();
    flush_notifications_locked();
    if (delivered()) return;
    const int count = transport_->poll(batch);
    if (count < 0) return;
    for (int index = 0; index < count; ++index) {
      const Completion& completion = batch[index];
      if (completion.kind != CompletionKind::arrived || completion.status != 0) {
        dispatch_locked(completion);
        continue;
      }
      const auto notification = decode_notification(completion.immediate);
      if (notification && (notification->kind == NotificationKind::slots_returned ||
                           notification->kind == NotificationKind::credit))
        on_notification_locked(*notification);
    }
    if (count > 0) continue;
    const auto now = Clock::now();
    if (now >= deadline) return;
    // Armed, then polled once more (a completion may have raced the arm): sleep.
    if (!std::exchange(armed, true)) {
      if (transport_->arm() < 0) return;
      continue;
    }
    armed = false;
    pollfd handle{transport_->wait_handle(), POLLIN, 0};
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
    state.unlock();
    // Another thread's poll may take the wakeup: never sleep long.
    next::poll(&handle, 1, static_cast<int>(std::clamp<int64_t>(left, 1, 10)));
    state.lock();
  }
}

}  // namespace qpsock::stream
