// The receiver's side of zero-copy writes. Rendezvous records are queued as
// they are scanned; the front one is pulled (with RDMA reads, or asked for
// piece by piece, in order, and written by the sender) as the application
// reads: straight into its buffer for big reads, through a bounce buffer for
// small reads and MSG_PEEK. When every byte is taken the receiver answers
// rendezvous_done, and the sender's write returns; a sender that wrote the
// bytes itself knows that from its completions, and is not answered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>

#include "stream/mapped_memory.h"
#include "stream/record.h"
#include "stream/transport.h"

namespace qpsock::stream {

struct IncomingRendezvous {
  RendezvousDescriptor descriptor;
  uint64_t ring_offset;    // of its record
  uint64_t requested = 0;  // bytes from the start whose reads were posted
  uint64_t taken = 0;      // bytes delivered to the application
  bool declined = false;   // cancelled before any read: its bytes are not in the stream
  // A receiver began pulling it: set before the puller first lets go of the
  // state lock (to register, or to wait for room to post), so that a cancel
  // taken in meanwhile by another thread's progress finds it too late.
  bool claimed = false;

  uint64_t untaken() const { return descriptor.length - taken; }
  uint64_t unrequested() const { return descriptor.length - requested; }
};

// Pulled bytes of the front rendezvous not yet delivered: source offsets
// [taken, requested). Used only by the one thread pulling at a time.
class BounceBuffer {
 public:
  // Makes room for `additional` bytes after the held ones (moving them to the
  // front, or into a bigger buffer registered for `access`: local_only for
  // our reads, remote_write for the peer's writes). 0 or -errno.
  int reserve(Transport& transport, size_t additional, MemoryAccess access);
  const std::byte* held() const { return memory_.data() + begin_; }
  size_t held_bytes() const { return end_ - begin_; }
  // Where the next `length` pulled bytes land (reserve() first).
  LocalSlice landing(size_t length);
  void on_pulled(size_t length) { end_ += length; }
  void consume(size_t length);
  size_t capacity() const { return memory_.size(); }

 private:
  MappedMemory memory_;
  std::unique_ptr<MemoryRegistration> registration_;
  size_t begin_ = 0;
  size_t end_ = 0;
};

enum class CancelAnswer : uint8_t { declined, too_late, unknown };

// Guarded by the stream's state lock (the bounce buffer by the puller).
class RendezvousReceiver {
 public:
  void on_scanned(const RendezvousDescriptor& descriptor, uint64_t ring_offset);
  // The sender asks to cancel `id`: declined if no byte was requested yet
  // (`declined_bytes` then says how many bytes leave the stream).
  CancelAnswer on_cancel(uint32_t id, uint64_t& declined_bytes);
  IncomingRendezvous* front() { return pending_.empty() ? nullptr : &pending_.front(); }
  void pop_front() { pending_.pop_front(); }
  BounceBuffer& bounce() { return bounce_; }

 private:
  std::deque<IncomingRendezvous> pending_;
  BounceBuffer bounce_;
};

}  // namespace qpsock::stream
