// ShmTransport's data path: registrations, posts (done at post time), polls,
// arming and breaking the link. Setup is in shm_establish.cc.
#include "transport/shm/shm_transport.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <limits>

#include "common/errno_guard.h"
#include "common/log.h"

namespace qpsock::transport::shm {

using stream::Completion;
using stream::CompletionKind;
using stream::LocalSlice;
using stream::MemoryAccess;
using stream::MemoryRegistration;
using stream::RemoteRegion;
using stream::kFlushedStatus;

namespace {

// A forked child's copy of a transport refuses every post and poll.
constexpr int kForkedStatus = -EPIPE;

class ShmRegistration final : public MemoryRegistration {
 public:
  ShmRegistration(std::shared_ptr<RegistrationPublisher> publisher, std::byte* address,
                  size_t length, uint32_t key, MemoryAccess access)
      : MemoryRegistration(address, length, key, key, access), publisher_(std::move(publisher)) {}
  ~ShmRegistration() override {
    if (publisher_ != nullptr) publisher_->revoke(remote_key());
  }

 private:
  std::shared_ptr<RegistrationPublisher> publisher_;  // null for local_only
};

size_t total_length(std::span<const LocalSlice> slices) {
  size_t total = 0;
  for (const LocalSlice& slice : slices) total += slice.length;
  return total;
}

}  // namespace

ShmTransport::ShmTransport(ConstructionKey, const ShmOptions& options)
    : options_(options), completions_(options.send_queue_depth) {}

ShmTransport::~ShmTransport() {
  // A forked child only drops its own copies of the mappings and fds.
  if (page_ != nullptr && in_owner_process()) {
    ErrnoGuard errno_guard;
    if (listening_for_exit_) peer_->unsubscribe(this);
    break_link();
    if (own_slot_ >= 0) peer_->own_doorbell().remove_channel(static_cast<uint32_t>(own_slot_));
  }
}

void ShmTransport::set_wakeup_listener(stream::WakeupListener* listener) {
  // A forked child's copy has no link to be told of (and the table's lock
  // may have been held at the fork).
  if (own_slot_ < 0 || !in_owner_process()) return;
  peer_->own_doorbell().set_listener(static_cast<uint32_t>(own_slot_), listener);
}

void ShmTransport::wake_own_sleeper() {
  if (own_slot_ < 0) return;
  // The word is in memory the peer writes: the waker we named is taken from
  // our own copy, never from it.
  wake_if_armed(local_->inbox().waiter, peer_->own_doorbell().target(),
                static_cast<uint32_t>(own_slot_),
                [this](uint32_t) { return own_sleeper_fd_.load(std::memory_order_relaxed); });
}

void ShmTransport::wake_peer_sleeper() {
  wake_if_armed(peer_arena_->inbox().waiter, peer_doorbell_->target(), peer_slot_,
                [this](uint32_t number) {
                  return peer_doorbell_->sleeper_fd(peer_->pidfd(), number,
                                                    [this] { return peer_runs_same_image(); });
                });
}

bool ShmTransport::peer_runs_same_image() const {
  // The probe word is where the peer said, in the image that made the arena.
  uint64_t word = 0;
  const iovec into{&word, sizeof(word)};
  return peer_->read({&into, 1}, peer_probe_address_, sizeof(word)) == 0 &&
         word == peer_arena_->control().probe_word;
}

void ShmTransport::peer_exited() {
  // As the peer's last act would: seen by the next poll, or it wakes the
  // sleeper armed for it (seq_cst after the report, as wakeup.h asks).
  ErrnoGuard errno_guard;
  wake_own_sleeper();
}

int ShmTransport::map_receive_ring(size_t length, stream::MappedMemory& ring) {
  if (!in_owner_process()) return kForkedStatus;
  return local_->map_ring(length, ring);
}

int ShmTransport::register_memory(void* address, size_t length, MemoryAccess access,
                                  std::unique_ptr<MemoryRegistration>& registration) {
  if (address == nullptr || length == 0) return -EINVAL;
  auto* begin = static_cast<std::byte*>(address);
  if (access == MemoryAccess::local_only) {
    // Our own memory is ours to touch: nothing to publish.
    registration = std::make_unique<ShmRegistration>(nullptr, begin, length, 0, access);
    return 0;
  }
  const uint64_t arena_offset = local_->ring_offset_of(address, length);
  // The peer writes only into the shared ring (see the header).
  if (access == MemoryAccess::remote_write && arena_offset == kNotInArena) return -EINVAL;
  const auto published = access == MemoryAccess::remote_write ? PublishedAccess::remote_write
                                                              : PublishedAccess::remote_read;
  const int64_t key = publisher_->publish(address, length, published, arena_offset);
  if (key < 0) return static_cast<int>(key);
  registration = std::make_unique<ShmRegistration>(publisher_, begin, length,
                                                   static_cast<uint32_t>(key), access);
  return 0;
}

int ShmTransport::post_write(std::span<const LocalSlice> source, RemoteRegion destination,
                             std::optional<uint32_t> immediate, uint64_t cookie) {
  return post(CompletionKind::write_done, source.size(), cookie,
              [&] { return deliver_write(source, destination, immediate); });
}

int ShmTransport::post_read(std::span<const LocalSlice> destination, RemoteRegion source,
                            uint64_t cookie) {
  return post(CompletionKind::read_done, destination.size(), cookie,
              [&] { return deliver_read(destination, source); });
}

int ShmTransport::post(CompletionKind kind, size_t slice_count, uint64_t cookie,
                       stream::FunctionRef<int()> deliver) {
  if (!in_owner_process()) return kForkedStatus;
  if (slice_count > options_.max_slices) return -EINVAL;
  if (completions_.full()) return -ENOMEM;
  ErrnoGuard errno_guard;
  int status = kFlushedStatus;
  if (!link_failed()) {
    status = deliver();
    if (status < 0) break_link();
  }
  complete({kind, status, cookie, 0});
  return 0;
}

int ShmTransport::deliver_write(std::span<const LocalSlice> source, RemoteRegion destination,
                                std::optional<uint32_t> immediate) {
  const size_t length = total_length(source);
  if (length > 0) {
    ResolvedRegion region;
    if (resolve_registration(peer_arena_->registrations(), destination, length,
                             PublishedAccess::remote_write, region) < 0 ||
        !peer_arena_->ring_contains(region.arena_offset, length))
      return -EFAULT;
    std::byte* into = peer_arena_->at(region.arena_offset);
    for (const LocalSlice& slice : source) {
      if (slice.length == 0) continue;
      std::memcpy(into, slice.address, slice.length);
      into += slice.length;
    }
  }
  if (!immediate) return 0;
  // One more than the peer can hold is an RNR: the link breaks.
  if (!outbox_.push(*immediate)) return -EIO;
  wake_peer_sleeper();
  return 0;
}

int ShmTransport::deliver_read(std::span<const LocalSlice> destination, RemoteRegion source) {
  const size_t length = total_length(destination);
  if (length == 0) return -EFAULT;
  std::array<iovec, 64> pieces;
  size_t count = 0;
  for (const LocalSlice& slice : destination) {
    if (slice.length == 0) continue;
    if (slice.registration == nullptr || !slice.registration->covers(slice.address, slice.length))
      return -EFAULT;
    pieces[count++] = {slice.address, slice.length};
  }
  ResolvedRegion region;
  if (resolve_registration(peer_arena_->registrations(), source, length,
                           PublishedAccess::remote_read, region) < 0)
    return -EFAULT;
  if (region.arena_offset != kNotInArena) {
    if (!peer_arena_->ring_contains(region.arena_offset, length)) return -EFAULT;
    const std::byte* from = peer_arena_->at(region.arena_offset);
    for (size_t index = 0; index < count; ++index) {
      std::memcpy(pieces[index].iov_base, from, pieces[index].iov_len);
      from += pieces[index].iov_len;
    }
    return 0;
  }
  if (int error = peer_->read({pieces.data(), count}, region.remote_address, length); error < 0) {
    QPSOCK_LOG(debug, "shm: process_vm_readv of pid %d failed: %d", peer_->pid(), error);
    return error == -ESRCH ? kFlushedStatus : -EFAULT;
  }
  // Deregistered while we read: what we got may not be what was published.
  return still_published(peer_arena_->registrations(), source.key) ? 0 : -EFAULT;
}

void ShmTransport::complete(const Completion& completion) {
  completions_.push(completion);
  // Another of our threads may sleep armed for it.
  wake_own_sleeper();
}

int ShmTransport::poll(std::span<Completion> completions) {
  if (!in_owner_process()) return kForkedStatus;
  ErrnoGuard errno_guard;
  // Take the wakeup before looking, so a wakeup for work we do not see
  // here comes again for the sleep that follows.
  consume_wakeup(local_->inbox().waiter);
  if (failure_reported_) return static_cast<int>(completions_.pop_into(completions));
  // The link's failure is looked at first: a peer pushes its last immediates
  // before it closes or dies, so once a failure is seen, the inbox holds
  // everything it sent. The peer's arrivals then come before our own
  // completions, as in an RC queue pair's completion queue, where what
  // arrived before the link failed comes before the flushed posts that
  // followed. (Otherwise a close between two looks, or a post of ours that
  // failed on it, would hide the peer's last notifications: its end of
  // stream, and bytes it wrote before it.)
  bool failed = link_failed();
  size_t count = pop_arrivals(completions);
  failed = failed || broken_;  // (an overrun breaks the link while popping)
  count += completions_.pop_into(completions.subspan(count));
  if (failed && count < completions.size()) {
    // As an RC QP flushes its receives: one error, after every arrival.
    completions[count++] = {CompletionKind::arrived, kFlushedStatus, 0, 0};
    failure_reported_ = true;
  }
  return static_cast<int>(count);
}

int ShmTransport::poll_for_exit(std::span<Completion> completions) {
  // Our posts completed when they were made: their completions wait here.
  // Then the peer's arrivals (its credit lets held bytes go); a peer that
  // overran its limit only ends the reaping (breaking the link is a state
  // change).
  if (!in_owner_process()) return kForkedStatus;
  size_t count = completions_.pop_into(completions);
  while (count < completions.size()) {
    uint32_t immediate;
    if (inbox_.pop(immediate) <= 0) break;
    completions[count++] = {CompletionKind::arrived, 0, 0, immediate};
  }
  return static_cast<int>(count);
}

bool ShmTransport::link_up_for_exit() const {
  return in_owner_process() && !broken_ && peer_arena_->control().closed.load() == 0;
}

size_t ShmTransport::pop_arrivals(std::span<Completion> completions) {
  size_t count = 0;
  while (count < completions.size()) {
    uint32_t immediate;
    const int popped = inbox_.pop(immediate);
    if (popped < 0) break_link();  // the peer overran its limit
    if (popped <= 0) break;
    completions[count++] = {CompletionKind::arrived, 0, 0, immediate};
  }
  return count;
}

bool ShmTransport::link_failed() {
  if (broken_) return true;
  if (peer_arena_->control().closed.load() != 0 || peer_->exit_reported()) {
    ErrnoGuard errno_guard;
    QPSOCK_LOG(debug, "shm: peer pid %d disconnected or exited", peer_->pid());
    peer_left_ = true;
    break_link();
    return true;
  }
  return false;
}

int ShmTransport::arm() { return arm_for_sleeper(-1); }

int ShmTransport::arm_for_sleeper(int sole_sleeper_fd) {
  if (!in_owner_process()) return kForkedStatus;
  // What is there already the caller's next poll finds (Transport::arm):
  // no wakeup for it.
  own_sleeper_fd_.store(sole_sleeper_fd, std::memory_order_relaxed);
  arm_waiter(local_->inbox().waiter, sole_sleeper_fd);
  return 0;
}

void ShmTransport::disconnect() {
  if (!in_owner_process()) return;
  ErrnoGuard errno_guard;
  break_link();
}

void ShmTransport::publish_consumed(uint64_t ring_bytes) {
  if (local_ != nullptr) local_->control().ring_consumed.store(ring_bytes, std::memory_order_release);
}

std::optional<uint64_t> ShmTransport::peer_consumed() const {
  if (peer_arena_ != nullptr) return peer_arena_->control().ring_consumed.load(std::memory_order_acquire);
  return peer_consumed_at_break_;
}

size_t ShmTransport::max_inline() const { return std::numeric_limits<size_t>::max(); }

void ShmTransport::break_link() {
  if (broken_ || local_ == nullptr) return;  // (or setup never got this far)
  broken_ = true;
  publisher_->revoke_all();
  local_->control().closed.store(1);  // seq_cst: published before the wakeup (wakeup.h)
  // Tell the peer, then let go of its memory (what its reader had consumed
  // stays known: the stream may ask after the break).
  if (peer_arena_ != nullptr) {
    peer_consumed_at_break_ = peer_arena_->control().ring_consumed.load(std::memory_order_acquire);
    if (peer_doorbell_ != nullptr) wake_peer_sleeper();
  }
  peer_arena_.reset();
  peer_doorbell_.reset();
  // Another of our threads may sleep armed: it must see the error.
  wake_own_sleeper();
}

}  // namespace qpsock::transport::shm
