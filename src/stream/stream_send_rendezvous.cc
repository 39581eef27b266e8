// Stream::send_rendezvous: a large piece of a blocking send, pulled by the
// peer straight from the application's buffer, or written by us straight
// into the peer application's buffer as it asks (stream_progress.cc).
#include <cerrno>

#include "common/log.h"
#include "stream/control_doorbell.h"
#include "stream/stream.h"

namespace qpsock::stream {

ssize_t Stream::send_rendezvous(StateLock& state, ByteRange piece, const RegistrationLease& lease,
                                std::optional<Clock::time_point> deadline) {
  const int64_t posted = post_rendezvous_descriptor(state, piece, lease);
  if (posted < 0) return posted;
  const auto id = static_cast<uint32_t>(posted);
  // A peer that takes nothing for this long is not reading: TCP would have
  // buffered the bytes and returned, so they are copied instead.
  const auto patience_ends = Clock::now() + settings_.rendezvous_patience;
  const bool sooner_than_timeout = !deadline || patience_ends < *deadline;
  // The buffer may be reused only once the peer has answered (or cannot read
  // it any more: a broken stream has disconnected the transport). Once a
  // cancel is asked, or the peer has begun, the wait is for the end.
  bool cancel_asked = false;
  ssize_t if_declined = -EINTR;
  for (;;) {
    const RendezvousOutcome outcome = rendezvous_out_.outcome(id);
    if (rendezvous_out_.settled(id) || broken_) {
      rendezvous_out_.finish(id);
      if (outcome == RendezvousOutcome::done) {
        ++rendezvous_counts_.sent;
        rendezvous_bytes_sent_.fetch_add(piece.length, std::memory_order_relaxed);
        return static_cast<ssize_t>(piece.length);
      }
      if (outcome == RendezvousOutcome::declined) return if_declined;
      return -EPIPE;
    }
    std::optional<Clock::time_point> wait_deadline;
    if (!cancel_asked) wait_deadline = sooner_than_timeout ? patience_ends : deadline;
    const int waited = wait_until(
        state, [&] { return rendezvous_out_.settled(id); },
        {.interruptible = !cancel_asked, .deadline = wait_deadline});
    if (cancel_asked || (waited != -EINTR && waited != -ETIMEDOUT)) continue;
    cancel_asked = true;
    // The peer asks for it piece by piece (RendezvousMethod::write) and has
    // begun: it takes it whole, and a cancel would be ignored, at the cost of
    // a message and a doorbell for every write that takes longer than the
    // patience (over Soft-RoCE a 1 MiB write takes about 30 ms).
    if (rendezvous_out_.begun(id)) continue;
    // Declined after a signal: EINTR; after SO_SNDTIMEO ran out: EAGAIN;
    // after the patience: copy it.
    if (waited == -ETIMEDOUT) if_declined = sooner_than_timeout ? 0 : -EAGAIN;
    QPSOCK_LOG(debug, "stream: withdrawing rendezvous %u (%zu bytes): %s", id, piece.length,
               if_declined == 0 ? "not taken within the patience; copying it if declined"
               : if_declined == -EAGAIN ? "SO_SNDTIMEO ran out" : "interrupted by a signal");
    cancel_rendezvous_locked(id);
  }
}

void Stream::cancel_rendezvous_locked(uint32_t id) {
  pending_replies_.push_back({NotificationKind::rendezvous_cancel, id});
  flush_notifications_locked();
  // The peer answers from its progress, which its application may never
  // make: its doorbell watcher makes it.
  ring_doorbell(control_);
}

int64_t Stream::post_rendezvous_descriptor(StateLock& state, ByteRange piece,
                                           const RegistrationLease& lease) {
  for (;;) {
    // The descriptor takes its place in the ring like any record: under the
    // send lock, taken before the state lock.
    state.unlock();
    StateLock send_lock(send_mutex_);
    state.lock();
    if (int error = send_error_locked(false); error < 0) return error;
    progress_locked();
    if (can_write_locked(kRendezvousRecordSize)) {
      WritePlan plan(send_credit_->written());
      const WriteBudget budget{send_credit_->room(),
                               transport_->send_queue_depth() - posts_outstanding_};
      const RendezvousDescriptor descriptor = rendezvous_out_.start(piece.data, piece.length, lease);
      if (eager_->plan_rendezvous(descriptor, budget, plan)) {
        send_credit_->on_written(plan.ring_bytes());
        posts_outstanding_ += static_cast<uint32_t>(plan.size());
        window_->on_counted_sent();
        const uint64_t announce = unnotified_ring_bytes_ + plan.ring_bytes();
        unnotified_ring_bytes_ = 0;
        unnotified_payload_ = 0;
        if (plan.needs_staging()) {
          state.unlock();
          eager_->stage(plan);
          state.lock();
        }
        if (!broken_) {
          const uint32_t units = static_cast<uint32_t>(announce / kRingUnit);
          if (const int error = eager_->post(plan, encode_notification({NotificationKind::data_arrived, units}));
              error < 0)
            post_failed_locked("a rendezvous descriptor", error);
        }
        if (broken_) {
          rendezvous_out_.finish(descriptor.id);
          return -EPIPE;
        }
        return descriptor.id;
      }
      rendezvous_out_.finish(descriptor.id);
    }
    send_lock.unlock();
    const int waited = wait_until(
        state, [&] { return can_write_locked(kRendezvousRecordSize) || write_shutdown_; },
        {.interruptible = true});
    if (waited < 0) return waited;
  }
}

}  // namespace qpsock::stream
