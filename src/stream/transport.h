// The transport the stream engine runs on: a reliable, connected pair of
// endpoints modeled on an RDMA RC queue pair (one-sided writes with an optional
// 32-bit immediate, one-sided reads, a completion queue, a completion channel).
//
// Two implementations exist or are planned: verbs (ibv_post_send with
// IBV_WR_RDMA_WRITE[_WITH_IMM] / IBV_WR_RDMA_READ, ibv_poll_cq, the completion
// channel's fd) and shared memory (memcpy into the peer's mapped ring, an
// eventfd, process_vm_readv for reads). The loopback transport is the in-process
// reference. Errors are return codes: 0 or a count on success, -errno on failure.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "stream/mapped_memory.h"

namespace qpsock::stream {

// What the *peer* may do with a registered region (the local side may always
// read and write its own registered memory).
enum class MemoryAccess : uint8_t {
  local_only,    // a source or destination of our own posts (lkey only)
  remote_write,  // our receive ring: the peer writes into it
  remote_read,   // a rendezvous source: the peer reads from it
};

// A registered region. Deregistered when destroyed (RAII): from then on the
// peer's accesses through remote_key() fail. Implementations derive from it.
class MemoryRegistration {
 public:
  virtual ~MemoryRegistration() = default;
  MemoryRegistration(const MemoryRegistration&) = delete;
  MemoryRegistration& operator=(const MemoryRegistration&) = delete;

  std::byte* address() const { return address_; }
  size_t length() const { return length_; }
  uint32_t local_key() const { return local_key_; }
  uint32_t remote_key() const { return remote_key_; }
  MemoryAccess access() const { return access_; }
  bool covers(const void* address, size_t length) const {
    auto* begin = static_cast<const std::byte*>(address);
    return begin >= address_ && length <= length_ &&
           static_cast<size_t>(begin - address_) <= length_ - length;
  }

 protected:
  MemoryRegistration(std::byte* address, size_t length, uint32_t local_key, uint32_t remote_key,
                     MemoryAccess access)
      : address_(address), length_(length), local_key_(local_key), remote_key_(remote_key),
        access_(access) {}

 private:
  std::byte* address_;
  size_t length_;
  uint32_t local_key_;
  uint32_t remote_key_;
  MemoryAccess access_;
};

// A piece of local memory a post reads from (write) or lands in (read).
// `registration` must cover it, except for writes of at most max_inline() bytes
// in total, which the transport copies at post time (it may then be null).
struct LocalSlice {
  std::byte* address;
  size_t length;
  const MemoryRegistration* registration;
};

// A place in the peer's registered memory: a virtual address and its remote key.
struct RemoteRegion {
  uint64_t address;
  uint32_t key;
};

enum class CompletionKind : uint8_t {
  write_done,  // our post_write finished: the bytes are in the peer's memory
  read_done,   // our post_read finished: the bytes are in our memory
  arrived,     // the peer's write with an immediate landed; `immediate` holds it
};

struct Completion {
  CompletionKind kind;
  // 0, or -errno: the operation failed and the connection is broken (every
  // later completion is failed too, as an RC queue pair in the error state).
  int status;
  uint64_t cookie;     // the post's cookie (write_done, read_done)
  uint32_t immediate;  // the peer's immediate (arrived)
};

// The status of every completion once the link is gone (a queue pair
// flushed or torn down, a peer that disconnected or died): the stream then
// reports the connection reset.
inline constexpr int kFlushedStatus = -ECONNRESET;

// Fewest slices a transport must accept in one post.
inline constexpr uint32_t kMinimumSlicesPerPost = 4;

// Told by a transport with no wait handle of its own (wait_handle() is -1)
// whenever an armed wait handle would have become readable: on another
// thread, never one inside a call of this transport, so the listener may
// take the locks its callers hold around those calls.
class WakeupListener {
 public:
  virtual void transport_signalled() = 0;

 protected:
  ~WakeupListener() = default;
};

// Calls that post or poll (post_write, post_read, poll, arm, disconnect) are
// serialized by the caller; register_memory and MemoryRegistration's destructor
// may run concurrently with them (ibv_reg_mr/ibv_dereg_mr are thread-safe).
class Transport {
 public:
  virtual ~Transport() = default;

  // Maps the memory of our receive ring, which the engine then registers
  // remote_write (the one optional hook; most transports keep the default:
  // anonymous private memory). The shm transport returns memory shared with
  // the peer process, so the peer's eager write is a memcpy, not a syscall.
  // 0 or -errno.
  virtual int map_receive_ring(size_t length, MappedMemory& ring) { return ring.map(length); }

  // Registers [address, address + length) for `access`.
  virtual int register_memory(void* address, size_t length, MemoryAccess access,
                              std::unique_ptr<MemoryRegistration>& registration) = 0;

  // A one-sided write of `source` into the peer's memory at `destination`.
  // With an immediate, the peer also gets an `arrived` completion carrying it,
  // after the bytes are visible (RDMA WRITE WITH IMM); a zero-length write with
  // an immediate is a pure notification. Writes are delivered in post order.
  // Every post (write or read) yields exactly one local completion.
  virtual int post_write(std::span<const LocalSlice> source, RemoteRegion destination,
                         std::optional<uint32_t> immediate, uint64_t cookie) = 0;
  // A one-sided read of the peer's memory at `source` into `destination`.
  virtual int post_read(std::span<const LocalSlice> destination, RemoteRegion source,
                        uint64_t cookie) = 0;

  // Fills `completions` with what is ready; returns how many, or -errno when the
  // completion queue itself failed. Never blocks. Also consumes the wait
  // handle's pending readiness (a completion channel's events).
  virtual int poll(std::span<Completion> completions) = 0;

  // An fd that becomes readable after arm() once a completion may be ready,
  // or -1: the transport tells its WakeupListener instead (a descriptor per
  // connection is what a process with thousands cannot spare).
  virtual int wait_handle() const = 0;
  // The listener for a transport whose wait_handle() is -1 (others ignore
  // it); null stops it, and returns only once no call of the old one runs.
  virtual void set_wakeup_listener(WakeupListener* /*listener*/) {}
  // Requests one wakeup of wait_handle() for the next completion. The caller
  // polls once more after arming, so a completion that raced the arm is seen.
  virtual int arm() = 0;
  // arm(), for a transport without a wait handle whose one sleeper now is
  // the thread whose eventfd (a waker that is never closed) is
  // `sole_sleeper_fd`: the transport may make that readable itself rather
  // than tell its listener (one thread hop fewer). -1: tell the listener.
  virtual int arm_for_sleeper(int /*sole_sleeper_fd*/) { return arm(); }

  // Moves the connection to the error state: the peer loses access to our
  // memory, pending and later posts complete with errors. Idempotent.
  virtual void disconnect() = 0;

  // For a process's _exit, perhaps in a signal handler that interrupted
  // malloc or one of the transport's own calls: the completions that are
  // ready, and nothing else done (no wakeup consumed, no event read, no log,
  // no allocation, no change of the link's state); a failed one is returned
  // as such. The default suits a transport whose poll is all that.
  virtual int poll_for_exit(std::span<Completion> completions) { return poll(completions); }
  // For the same: whether the link is up as far as can be seen without
  // acting on it, so that posts may still reach the peer.
  virtual bool link_up_for_exit() const { return true; }

  // Writes of at most this many bytes in total are copied at post time (the
  // source is reusable at once and needs no registration). 0 if none.
  virtual size_t max_inline() const = 0;
  // How many reads may be in flight at once (RDMA's initiator depth).
  virtual uint32_t max_outstanding_reads() const = 0;
  // How many posts may be awaiting their completion at once (send queue depth).
  virtual uint32_t send_queue_depth() const = 0;
  // How many immediates this endpoint can hold before it polls them (its
  // receive queue depth). The engine tells the peer at connect, and the peer
  // never sends more (one more would be an RNR error).
  virtual uint32_t notification_capacity() const = 0;
  // Most slices one post may carry (at least kMinimumSlicesPerPost).
  virtual uint32_t max_slices() const = 0;
  // Most bytes one read may move: the engine splits a larger pull into reads
  // of at most this many, pipelined up to max_outstanding_reads(). (Verbs
  // keeps reads short: an RC read is retried when its whole response
  // outlasts the queue pair's ACK timeout.)
  virtual uint64_t max_read_length() const { return uint64_t{1} << 30; }

  // The ring bytes our reader has consumed, published where the peer can
  // read them even once we are gone (shared memory), so that it can tell, if
  // our process ends without closing, whether we left bytes of its unread
  // (TCP's FIN or RST). Transports with no such place ignore it.
  virtual void publish_consumed(uint64_t /*ring_bytes*/) {}
  // The peer's published count, if the transport has one.
  virtual std::optional<uint64_t> peer_consumed() const { return std::nullopt; }
  // Whether the link went because the peer's end left it (rdma_cm's
  // disconnect request, or over shared memory its close or its process's
  // end), not through a failure seen here. Then its kernel is alive and sends the TCP
  // connection's FIN or RST too, perhaps a moment later.
  virtual bool peer_left() const { return false; }
  // Whether the peer's process runs on this host and may share a core with
  // ours, its work done in its own threads (shared memory): then a spinning
  // wait may hold up the very answer it waits for, and waits stop spinning
  // while yields keep running another thread (stream_wait.cc). Not so across
  // hosts, nor over Soft-RoCE, whose kernel threads also run after a yield.
  virtual bool peer_may_share_core() const { return false; }
};

}  // namespace qpsock::stream
