// Stream::receive: data records are copied out of our ring; rendezvous bytes
// are pulled from the sender's buffer (stream_pull.cc). MSG_PEEK copies
// without consuming.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "libc/next_symbols.h"
#include "stream/stream.h"

namespace qpsock::stream {
namespace {

// Announced ring bytes up to which a read copies with the state lock held.
constexpr uint64_t kCopyUnderLockLimit = 4096;

}  // namespace

ssize_t Stream::receive(std::span<const iovec> buffers, int flags, Blocking blocking) {
  if ((flags & MSG_DONTWAIT) != 0) blocking = Blocking(false);
  if ((flags & MSG_OOB) != 0) return -EINVAL;  // TCP without urgent data
  const bool peeking = (flags & MSG_PEEK) != 0;
  const bool wait_all = (flags & MSG_WAITALL) != 0 && blocking();
  const size_t wanted = IovecCursor::total_length(buffers);
  IovecCursor destination(buffers);
  ssize_t delivered = 0;
  RegistrationLease prepared_landing;
  // The wait below ends with a progress that found what it waited for: the
  // pass after it looks at that without polling again (an empty poll on the
  // way from an arrival to the application).
  bool just_progressed = false;
  for (;;) {
    StateLock receive_lock(receive_mutex_);
    StateLock state(state_mutex_);
    if (!connected_) return -ENOTCONN;
    flush_unnotified_locked();
    if (!std::exchange(just_progressed, false)) progress_locked();
    if (wanted == 0) {
      // As tcp_recvmsg: nothing to copy, but a call that may not wait on an
      // empty, open stream says EAGAIN (a blocking one returns 0 at once).
      if (blocking() || readable_bytes_ > 0 || eof_received_ || read_shutdown_) return 0;
      if (broken_) return receive_error_locked();
      return -EAGAIN;
    }
    if (pull_active_) {
      // Another receiver waits for its reads; its bytes come first.
      receive_lock.unlock();
      wait_until(state, [&] { return !pull_active_; }, {});
      continue;
    }
    // What this pass looks at; the wait below is for anything beyond it (the
    // copy runs unlocked, so notified_ may move on while we look).
    const uint64_t examined = notified_;
    ssize_t have = 0;
    if (peeking) {
      const ssize_t peeked = peek(receive_lock, state, buffers);
      if (peeked < 0) return peeked;
      have = peeked;
    } else {
      for (;;) {
        const uint64_t head_before = read_offset_;
        const ssize_t delivered_before = delivered;
        delivered += static_cast<ssize_t>(deliver_backlog(state, destination));
        if (destination.done()) break;
        delivered += static_cast<ssize_t>(deliver_ring_data(state, destination));
        if (destination.done()) break;
        const ssize_t pulled = deliver_rendezvous(receive_lock, state, destination, prepared_landing);
        if (pulled < 0) return delivered > 0 ? delivered : pulled;
        delivered += pulled;
        if (destination.done() || (read_offset_ == head_before && delivered == delivered_before))
          break;
      }
      have = delivered;
    }
    // As tcp_recvmsg: a blocking call returns once it has its target (all it
    // asked for with MSG_WAITALL, else SO_RCVLOWAT's bytes), one that may not
    // wait with whatever it found.
    const size_t target = wait_all ? wanted : std::min<uint64_t>(receive_low_water_, wanted);
    if (static_cast<size_t>(have) >= target || (have > 0 && !blocking())) {
      // A rendezvous we finished is answered before a blocking call returns:
      // its writer waits for the answer, and with every counted slot of ours
      // in flight it would wait for our next call (which may never come).
      // The writer's engine, awake for that answer, returns a slot at once.
      if (blocking() && answer_owed_locked()) {
        receive_lock.unlock();
        wait_until(state, [&] { return !answer_owed_locked(); },
                   {.interruptible = true, .deadline = blocking.deadline()});
      }
      return have;
    }
    // Nothing more is here now. A peer that left the link may yet send its
    // FIN (an orderly end) or RST: until then nothing is said.
    const bool verdict_pending = broken_ && settle_provisional_reset_locked();
    if (at_end_of_stream_locked()) return have;
    // A reset reaches a reader even after shutdown(SHUT_RD), as in tcp_recvmsg.
    if (broken_ && !verdict_pending) return have > 0 ? have : receive_error_locked();
    if (read_shutdown_) return have;
    if (!blocking()) return have > 0 ? have : -EAGAIN;
    if (verdict_pending) {
      const int waited = wait_for_peer_verdict(receive_lock, state);
      if (waited < 0) return have > 0 ? have : waited;
      continue;
    }
    if (have == 0 && !peeking && !prepared_landing) prepare_landing_locked(state, destination, prepared_landing);
    receive_lock.unlock();
    const int waited = wait_until(
        state, [&] { return notified_ != examined || eof_received_ || read_shutdown_; },
        {.interruptible = true, .deadline = blocking.deadline(), .adaptive_spin = true});
    // SO_RCVTIMEO ran out: what was read, or EAGAIN, as the kernel answers.
    if (waited == -ETIMEDOUT) return have > 0 ? have : -EAGAIN;
    if (waited < 0) return have > 0 ? have : waited;
    just_progressed = true;
  }
}

void Stream::prepare_landing_locked(StateLock& state, const IovecCursor& destination,
                                    RegistrationLease& landing) {
  // Only where the last read was a direct pull: a stream of small writes
  // would pay a registration per read for nothing.
  const ByteRange segment = destination.contiguous();
  if (expected_rendezvous_length_ == 0 || segment.length < settings_.direct_pull_minimum) return;
  // As much as the last one took: a large buffer is not pinned whole for a
  // write that may be smaller.
  const uint64_t length = std::min<uint64_t>(segment.length, expected_rendezvous_length_);
  state.unlock();
  // Unused if the bytes come otherwise; a failure only means registering
  // later (and not again in advance).
  const int registered = registrations_->acquire(segment.data, length, landing_access(), landing);
  state.lock();
  if (registered < 0) {
    landing.reset();
    expected_rendezvous_length_ = 0;
  }
}

int Stream::wait_for_peer_verdict(StateLock& receive_lock, StateLock& state) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(*reset_provisional_until_ -
                                                                 Clock::now());
  // Without a kept number (the application closed it) it sleeps out the grace.
  pollfd control{still_kept(control_) ? control_.fd : -1, POLLIN | POLLRDHUP, 0};
  state.unlock();
  receive_lock.unlock();
  const int polled = next::poll(&control, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
  return polled < 0 && errno == EINTR ? -EINTR : 0;
}

int Stream::receive_error_locked() {
  // Reported once, as TCP reports a reset; then the stream reads as ended.
  return pending_error_ != 0 ? -std::exchange(pending_error_, 0) : 0;
}

bool Stream::answer_owed_locked() const {
  return std::any_of(pending_replies_.begin(), pending_replies_.end(), [](const Notification& reply) {
    return reply.kind == NotificationKind::rendezvous_done;
  });
}

bool Stream::at_end_of_stream_locked() const {
  return eof_received_ && read_offset_ == eof_offset_ && backlog_.empty();
}

size_t Stream::deliver_backlog(StateLock& state, IovecCursor& destination) {
  if (backlog_.empty()) return 0;
  // The backlog is the receive lock's: the copy needs no state lock.
  std::optional<uint64_t> finished_ring_end;
  state.unlock();
  const size_t copied = backlog_.take(destination, finished_ring_end);
  state.lock();
  readable_bytes_ -= std::min<uint64_t>(copied, readable_bytes_);
  expected_rendezvous_length_ = 0;
  // What the peer may learn we have read: the ring bytes of every chunk taken.
  if (finished_ring_end)
    transport_->publish_consumed(backlog_.empty() ? receive_credit_.consumed() : *finished_ring_end);
  return copied;
}

void Stream::take_into_backlog_locked(StateLock& state) {
  const uint64_t limit = settings_.receive_backlog_limit;
  if (!connected_ || broken_ || pull_active_ || limit == 0) return;
  bool moved_any = false;
  while (backlog_.bytes() < limit && notified_ != read_offset_) {
    // The payload at the head is at most the announced ring bytes.
    const uint64_t reserved =
        backlog_.reserve(std::min(limit - backlog_.bytes(), notified_ - read_offset_),
                         settings_.backlog_process_limit);
    if (reserved == 0) break;  // the process holds all it may: the peer waits, as over TCP
    std::vector<std::byte> chunk(reserved);
    iovec piece{chunk.data(), chunk.size()};
    IovecCursor destination({&piece, 1});
    const size_t moved = deliver_ring_data(state, destination, RingTaker::backlog);
    backlog_.give_back(reserved - moved);
    if (moved > 0) {
      chunk.resize(moved);
      if (moved < chunk.capacity() / 2) chunk.shrink_to_fit();
      backlog_.append(std::move(chunk), receive_credit_.consumed());
      moved_any = true;
      continue;
    }
    // A rendezvous its writer withdrew is not in the stream: what follows
    // it (the same bytes, copied) may move. Any other stops here.
    const RecordView record = read_record(ring_.bytes(), ring_geometry_, read_offset_, notified_);
    const IncomingRendezvous* rendezvous = rendezvous_in_.front();
    if (record.status != RecordStatus::complete || record.header.type != RecordType::rendezvous ||
        rendezvous == nullptr || rendezvous->ring_offset != record.offset || !rendezvous->declined)
      break;
    consume_record_locked(record);
    rendezvous_in_.pop_front();
    moved_any = true;
  }
  if (!moved_any) return;
  QPSOCK_LOG(debug, "stream: %llu bytes unread by the application are held for it, the peer's ring room freed",
             static_cast<unsigned long long>(backlog_.bytes()));
  return_all_credit_locked();
  flush_notifications_locked();
}

size_t Stream::deliver_ring_data(StateLock& state, IovecCursor& destination, RingTaker taker) {
  const uint64_t limit = notified_;
  uint64_t offset = read_offset_;
  if (offset == limit) return 0;  // nothing announced: no need to let go of the lock
  uint64_t taken = head_taken_;
  uint64_t payload_copied = 0;
  uint64_t ring_consumed = 0;
  uint8_t flags = 0;
  bool corrupt = false;
  // The records before `limit` cannot change under us: the peer writes there
  // only after we return their credit, and only this receiver does. So the
  // copy may run unlocked; a short one does not, since letting go of the
  // lock and taking it again costs more than the copy (a 64-byte message's
  // read: one lock of three).
  const bool copy_unlocked = limit - offset > kCopyUnderLockLimit;
  if (copy_unlocked) state.unlock();
  while (!destination.done()) {
    const RecordView record = read_record(ring_.bytes(), ring_geometry_, offset, limit);
    if (record.status == RecordStatus::corrupt) corrupt = true;
    if (record.status != RecordStatus::complete || record.header.type == RecordType::rendezvous)
      break;
    if (record.header.type == RecordType::data) {
      const uint64_t count = std::min<uint64_t>(destination.remaining(),
                                                record.header.payload_length - taken);
      destination.scatter(record.payload + taken, count);
      taken += count;
      payload_copied += count;
      if (taken < record.header.payload_length) break;
      flags |= record.header.flags;
    }
    ring_consumed += record.ring_bytes();
    offset = record.end();
    taken = 0;
  }
  if (copy_unlocked) state.lock();
  read_offset_ = offset;
  head_taken_ = taken;
  const bool read = taker == RingTaker::application;
  if (read) readable_bytes_ -= std::min(payload_copied, readable_bytes_);
  if (read && payload_copied > 0) expected_rendezvous_length_ = 0;
  if (ring_consumed > 0) {
    note_consumed_locked(ring_consumed, (flags & kRecordCreditWanted) != 0, read);
    // Consuming makes only credit due (anything else waits for a completion).
    if (receive_credit_.to_return() > 0) flush_notifications_locked();
  }
  // The stream is broken now; receive() reports it once nothing more is here.
  if (corrupt) protocol_error_locked("bad record at the head");
  return payload_copied;
}

void Stream::consume_record_locked(const RecordView& record) {
  read_offset_ = record.end();
  head_taken_ = 0;
  note_consumed_locked(record.ring_bytes(), (record.header.flags & kRecordCreditWanted) != 0);
}

void Stream::note_consumed_locked(uint64_t ring_bytes, bool sender_wants_credit, bool read) {
  receive_credit_.on_consumed(ring_bytes, sender_wants_credit);
  // Bytes in the backlog are not read yet: the published count stays
  // before them (deliver_backlog moves it on).
  if (read && backlog_.empty()) transport_->publish_consumed(receive_credit_.consumed());
}

size_t Stream::take_from_bounce_locked(IncomingRendezvous& rendezvous, IovecCursor& destination) {
  BounceBuffer& bounce = rendezvous_in_.bounce();
  const size_t count = std::min(destination.remaining(), bounce.held_bytes());
  destination.scatter(bounce.held(), count);
  bounce.consume(count);
  rendezvous.taken += count;
  readable_bytes_ -= std::min<uint64_t>(count, readable_bytes_);
  return count;
}

ssize_t Stream::deliver_rendezvous(StateLock& receive_lock, StateLock& state,
                                   IovecCursor& destination,
                                   const RegistrationLease& prepared_landing) {
  const RecordView record = read_record(ring_.bytes(), ring_geometry_, read_offset_, notified_);
  if (record.status != RecordStatus::complete || record.header.type != RecordType::rendezvous)
    return 0;
  IncomingRendezvous* rendezvous = rendezvous_in_.front();
  if (rendezvous == nullptr || rendezvous->ring_offset != record.offset) {
    protocol_error_locked("rendezvous record out of order");
    return 0;
  }
  if (rendezvous->declined) {
    // Cancelled by its sender before we began: its bytes are not in the stream.
    consume_record_locked(record);
    rendezvous_in_.pop_front();
    flush_notifications_locked();
    return 0;
  }
  size_t delivered = take_from_bounce_locked(*rendezvous, destination);
  if (drop_unfinished_rendezvous_locked(record, *rendezvous)) return static_cast<ssize_t>(delivered);
  if (rendezvous->untaken() > 0 && !destination.done()) {
    const ByteRange segment = destination.contiguous();
    const uint64_t want = std::min<uint64_t>(destination.remaining(), rendezvous->untaken());
    int result = 1;
    if (segment.length >= settings_.direct_pull_minimum && want >= settings_.direct_pull_minimum) {
      const ByteRange target{segment.data, std::min<uint64_t>(segment.length, want)};
      result = pull_direct(receive_lock, state, *rendezvous, target, prepared_landing);
      expected_rendezvous_length_ = result == 0 ? target.length : 0;
      if (result == 0) {
        destination.advance(target.length);
        rendezvous->taken += target.length;
        readable_bytes_ -= std::min<uint64_t>(target.length, readable_bytes_);
        delivered += target.length;
      }
    }
    if (result == 1) {
      const uint64_t pull = std::min<uint64_t>(rendezvous->unrequested(),
                                               std::max<uint64_t>(want, settings_.bounce_size));
      result = pull_into_bounce(receive_lock, state, *rendezvous, pull);
      if (result == 0) delivered += take_from_bounce_locked(*rendezvous, destination);
    }
    // A writer that ended during the pull: what follows its write comes next.
    if (result < 0 && drop_unfinished_rendezvous_locked(record, *rendezvous))
      return static_cast<ssize_t>(delivered);
    // A broken stream is reported by receive() once nothing more is here.
    if (result < 0 && (delivered > 0 || broken_)) return static_cast<ssize_t>(delivered);
    if (result < 0) return result;
  }
  if (rendezvous->untaken() == 0) {
    ++rendezvous_counts_.received;
    rendezvous_bytes_received_.fetch_add(rendezvous->descriptor.length, std::memory_order_relaxed);
    // A writer knows from its own completions that we have every byte.
    if (!writes_rendezvous())
      pending_replies_.push_back({NotificationKind::rendezvous_done, rendezvous->descriptor.id});
    consume_record_locked(record);
    rendezvous_in_.pop_front();
    flush_notifications_locked();
  }
  return static_cast<ssize_t>(delivered);
}

bool Stream::drop_unfinished_rendezvous_locked(const RecordView& record,
                                               IncomingRendezvous& rendezvous) {
  // The writer's process ended in the middle of this write, and its end was
  // orderly. What had landed is delivered (the bounce buffer first); the
  // rest was never sent, as the part of a TCP write its kernel had not yet
  // accepted.
  if (!peer_ended_in_order_locked() || rendezvous.untaken() == 0 ||
      rendezvous_in_.bounce().held_bytes() > 0)
    return false;
  QPSOCK_LOG(debug, "stream: the peer ended %llu bytes into a write of %llu; the rest never came",
             static_cast<unsigned long long>(rendezvous.taken),
             static_cast<unsigned long long>(rendezvous.descriptor.length));
  readable_bytes_ -= std::min<uint64_t>(rendezvous.untaken(), readable_bytes_);
  consume_record_locked(record);
  rendezvous_in_.pop_front();
  flush_notifications_locked();
  return true;
}

ssize_t Stream::peek(StateLock& receive_lock, StateLock& state, std::span<const iovec> buffers) {
  for (;;) {
    IovecCursor view(buffers);
    size_t copied = backlog_.peek(view);
    uint64_t offset = read_offset_;
    uint64_t taken = head_taken_;
    bool pulled = false;
    while (!view.done()) {
      const RecordView record = read_record(ring_.bytes(), ring_geometry_, offset, notified_);
      if (record.status == RecordStatus::corrupt) {
        protocol_error_locked("bad record");
        return static_cast<ssize_t>(copied);
      }
      if (record.status != RecordStatus::complete) break;
      if (record.header.type == RecordType::data) {
        const uint64_t count =
            std::min<uint64_t>(view.remaining(), record.header.payload_length - taken);
        view.scatter(record.payload + taken, count);
        copied += count;
        if (taken + count < record.header.payload_length) break;
      } else if (record.header.type == RecordType::rendezvous) {
        IncomingRendezvous* rendezvous = rendezvous_in_.front();
        // Only the front rendezvous has a bounce buffer: stop at any later one.
        if (rendezvous == nullptr || rendezvous->ring_offset != record.offset) break;
        if (!rendezvous->declined) {
          BounceBuffer& bounce = rendezvous_in_.bounce();
          const uint64_t want = std::min<uint64_t>(view.remaining(), rendezvous->untaken());
          // Its writer ended in the middle of it: what landed is all there
          // is of it, and what follows comes next (drop_unfinished_rendezvous_locked).
          const bool writer_ended = peer_ended_in_order_locked();
          if (!writer_ended && bounce.held_bytes() < want && rendezvous->unrequested() > 0) {
            const uint64_t more = std::min<uint64_t>(
                rendezvous->unrequested(),
                std::max<uint64_t>(want - bounce.held_bytes(), settings_.bounce_size));
            if (int error = pull_into_bounce(receive_lock, state, *rendezvous, more); error < 0)
              return copied > 0 || broken_ ? static_cast<ssize_t>(copied) : error;
            pulled = true;
            break;  // the head may have moved meanwhile: look again from it
          }
          const size_t count = std::min<size_t>(want, bounce.held_bytes());
          view.scatter(bounce.held(), count);
          copied += count;
          if (count < rendezvous->untaken() && !writer_ended) break;
        }
      }
      offset = record.end();
      taken = 0;
    }
    if (!pulled) return static_cast<ssize_t>(copied);
  }
}

}  // namespace qpsock::stream
