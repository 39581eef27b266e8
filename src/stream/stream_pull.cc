// RDMA reads of the front rendezvous, into the application's buffer or the
// bounce buffer. While its reads are in flight the puller holds no lock;
// pull_active_ keeps other receivers out until it has taken its bytes.
#include <algorithm>
#include <cerrno>

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
                        ByteRange destination) {
  rendezvous.claimed = true;
  // Registering can take a while: not under the state lock (the receive lock
  // keeps the rendezvous ours).
  state.unlock();
  RegistrationLease lease;
  const int registered = registrations_->acquire(destination.data, destination.length,
                                                 MemoryAccess::local_only, lease);
  state.lock();
  if (registered < 0) return 1;
  return run_pull(receive_lock, state, rendezvous,
                  LocalSlice{destination.data, destination.length, lease.get()});
}

int Stream::pull_into_bounce(StateLock& receive_lock, StateLock& state,
                             IncomingRendezvous& rendezvous, uint64_t length) {
  rendezvous.claimed = true;
  BounceBuffer& bounce = rendezvous_in_.bounce();
  state.unlock();
  const int reserved = bounce.reserve(*transport_, length);
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
  receive_lock.unlock();
  const RendezvousDescriptor& source = rendezvous.descriptor;
  const uint32_t most_reads = transport_->max_outstanding_reads();
  const uint64_t largest_read =
      std::clamp<uint64_t>(transport_->max_read_length(), 1, kLargestRead);
  uint64_t done = 0;
  while (done < landing.length && !broken_) {
    const int waited = wait_until(
        state,
        [&] { return reads_outstanding_ < most_reads && send_queue_has_room_locked(1); }, {});
    if (waited < 0 || broken_) break;
    const uint64_t length = std::min(landing.length - done, largest_read);
    const LocalSlice piece{landing.address + done, length, landing.registration};
    // Counted as requested before it lands: a cancel must not decline it now.
    const RemoteRegion from{source.source_address + rendezvous.requested, source.remote_key};
    rendezvous.requested += length;
    ++posts_outstanding_;
    ++reads_outstanding_;
    if (const int error = transport_->post_read({&piece, 1}, from, plain_cookie(PostKind::read));
        error < 0) {
      --posts_outstanding_;
      --reads_outstanding_;
      post_failed_locked("a rendezvous read", error);
      break;
    }
    done += length;
  }
  // The reads write into memory we are about to hand out (or hand back):
  // wait for every one. While the stream is whole that takes what the
  // hardware takes (an RDMA read of many MiB may take seconds); once it is
  // broken its transport flushes them, and the wait is bounded, in case the
  // completion queue died with it.
  const auto reads_done = [&] { return reads_outstanding_ == 0; };
  wait_until(state, reads_done, {});
  if (!reads_done())
    wait_until(state, reads_done,
               {.until_broken = false, .deadline = Clock::now() + kReadFlushLimit});
  // Take the receive lock back (it comes before the state lock) while
  // pull_active_ still keeps other receivers away from the rendezvous.
  state.unlock();
  receive_lock.lock();
  state.lock();
  pull_active_ = false;
  notify_waiters_locked();
  return broken_ ? -ECONNRESET : 0;
}

}  // namespace qpsock::stream
