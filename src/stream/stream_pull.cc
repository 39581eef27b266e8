// Pulling the front rendezvous into the application's buffer or the bounce
// buffer: with RDMA reads, or by asking the sender to write the bytes there
// (RendezvousMethod::write). While its pieces are in flight the puller holds
// no lock; pull_active_ keeps other receivers out until it has taken its
// bytes.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "stream/stream.h"

namespace qpsock::stream {

namespace {

// One read moves at most this much (and at most the transport's
// max_read_length()), so a huge pull still pipelines.
constexpr uint64_t kLargestRead = uint64_t{1} << 30;
// How long a broken stream waits for its reads' flushed completions.
constexpr std::chrono::seconds kReadFlushLimit{1};

}  // namespace

int Stream::pull_direct(StateLock& receive_lock, StateLock& state, IncomingRendezvous& rendezvous,
                        ByteRange destination, const RegistrationLease& prepared_landing) {
  rendezvous.claimed = true;
  RegistrationLease lease = prepared_landing;
  if (!lease || !lease->covers(destination.data, destination.length)) {
    // Registering can take a while: not under the state lock (the receive
    // lock keeps the rendezvous ours).
    state.unlock();
    const int registered = registrations_->acquire(destination.data, destination.length,
                                                   landing_access(), lease);
    state.lock();
    if (registered < 0) return 1;
  }
  return run_pull(receive_lock, state, rendezvous,
                  LocalSlice{destination.data, destination.length, lease.get()});
}

int Stream::pull_into_bounce(StateLock& receive_lock, StateLock& state,
                             IncomingRendezvous& rendezvous, uint64_t length) {
  rendezvous.claimed = true;
  BounceBuffer& bounce = rendezvous_in_.bounce();
  state.unlock();
  const int reserved = bounce.reserve(*transport_, length, landing_access());
  state.lock();
  if (reserved < 0) return reserved;
  const int pulled = run_pull(receive_lock, state, rendezvous, bounce.landing(length));
  if (pulled == 0) bounce.on_pulled(length);
  return pulled;
}

int Stream::run_pull(StateLock& receive_lock, StateLock& state, IncomingRendezvous& rendezvous,
                     LocalSlice landing) {
  if (broken_) return -ECONNRESET;
  pull_active_ = true;
  pull_failed_ = false;
  receive_lock.unlock();
  // A request is a counted notification (it takes one of the peer's slots)
  // and a slot of the peer's request box; a read takes an initiator slot.
  const bool by_write = writes_rendezvous();
  const uint32_t most_pieces =
      by_write ? kMostWriteRequestsInFlight : transport_->max_outstanding_reads();
  const uint64_t largest_piece =
      by_write ? kLargestRead : std::clamp<uint64_t>(transport_->max_read_length(), 1, kLargestRead);
  uint64_t done = 0;
  while (done < landing.length && !broken_) {
    const int waited = wait_until(
        state,
        [&] {
          return pull_pieces_outstanding_ < most_pieces && send_queue_has_room_locked(1) &&
                 (!by_write || window_->can_send_counted());
        },
        {});
    if (waited < 0 || broken_) break;
    const uint64_t length = std::min(landing.length - done, largest_piece);
    // Counted as requested before it lands: a cancel must not decline it now.
    const uint64_t source_offset = rendezvous.requested;
    rendezvous.requested += length;
    if (post_pull_piece_locked(rendezvous,
                               LocalSlice{landing.address + done, length, landing.registration},
                               source_offset) < 0)
      break;
    done += length;
  }
  // The pieces land in memory we are about to hand out (or hand back): wait
  // for every one. While the stream is whole that takes what the hardware
  // takes (an RDMA read of many MiB may take seconds). Once it is broken its
  // transport flushes our reads, and the wait is bounded, in case the
  // completion queue died with it; the peer's writes can no longer reach us
  // (the transport is disconnected), so requests are given up at once.
  const auto pieces_landed = [&] { return pull_pieces_outstanding_ == 0; };
  wait_until(state, pieces_landed, {});
  // Every piece asked for and landed is the pull done, even if the stream
  // broke since: a writer whose last write completed may return, close and
  // disconnect before we look (its bytes are ours, and read before its end).
  const bool all_landed = done == landing.length && pieces_landed() && !pull_failed_;
  if (broken_ && by_write) pull_pieces_outstanding_ = 0;
  if (!pieces_landed())
    wait_until(state, pieces_landed,
               {.until_broken = false, .deadline = Clock::now() + kReadFlushLimit});
  // Take the receive lock back (it comes before the state lock) while
  // pull_active_ still keeps other receivers away from the rendezvous.
  state.unlock();
  receive_lock.lock();
  state.lock();
  pull_active_ = false;
  notify_waiters_locked();
  return all_landed ? 0 : -ECONNRESET;
}

int Stream::post_pull_piece_locked(const IncomingRendezvous& rendezvous, LocalSlice piece,
                                   uint64_t source_offset) {
  const RendezvousDescriptor& source = rendezvous.descriptor;
  ++posts_outstanding_;
  ++pull_pieces_outstanding_;
  ++rendezvous_counts_.pieces_pulled;
  int error = 0;
  if (writes_rendezvous()) {
    const uint32_t slot = next_request_slot_;
    next_request_slot_ = (next_request_slot_ + 1) % kRequestBoxSlots;
    const RendezvousWriteRequest request{reinterpret_cast<uint64_t>(piece.address), source_offset,
                                         piece.length, piece.registration->remote_key(), source.id};
    std::byte* outgoing = request_outbox_.data() + slot * sizeof(request);
    std::memcpy(outgoing, &request, sizeof(request));
    const LocalSlice request_bytes{outgoing, sizeof(request), request_outbox_registration_.get()};
    window_->on_counted_sent();
    error = transport_->post_write(
        {&request_bytes, 1},
        RemoteRegion{peer_request_box_.address + slot * sizeof(request), peer_request_box_.key},
        encode_notification({NotificationKind::rendezvous_write_request, slot}),
        plain_cookie(PostKind::notification));
  } else {
    error = transport_->post_read(
        {&piece, 1}, RemoteRegion{source.source_address + source_offset, source.remote_key},
        plain_cookie(PostKind::read));
  }
  if (error < 0) {
    --posts_outstanding_;
    --pull_pieces_outstanding_;
    post_failed_locked(writes_rendezvous() ? "a rendezvous write request" : "a rendezvous read",
                       error);
  }
  return error;
}

}  // namespace qpsock::stream
