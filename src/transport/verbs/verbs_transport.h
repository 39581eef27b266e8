// The RDMA transport: stream::Transport over one RC queue pair, set up with
// rdma_cm (IB, RoCE and iWARP alike). What the upgrade layer calls is
// VerbsConnector::connect or VerbsListener::accept (verbs_connector.h,
// verbs_listener.h); each returns this transport and the peer's
// StreamEndpoint, then Stream::create(transport, ...) and
// Stream::connect(peer) run the engine over it unchanged.
//
// How it maps the interface (docs/stream-engine.md, "The verbs transport"):
// - post_write is IBV_WR_RDMA_WRITE, or RDMA_WRITE_WITH_IMM with the
//   immediate in network order (a zero-length one is a pure notification);
//   IBV_SEND_INLINE when the whole write fits the inline size the queue pair
//   got. post_read is IBV_WR_RDMA_READ. Every post is IBV_SEND_SIGNALED, so
//   each yields exactly one completion; a ledger of posts in order gives each
//   completion (failed ones included, whose opcode is undefined) its kind and
//   cookie.
// - Immediates consume receive work requests: notification_capacity()
//   zero-length receives are posted before the connection exists, and
//   kSpareReceives more. poll() posts again the receives its `arrived`
//   completions consumed once there are kSpareReceives of them (one post
//   for many: a post per message cost a tenth of its receive path), before
//   the engine sees them and can return their slots to the peer, so at
//   least notification_capacity() stay posted. The engine never has more
//   immediates outstanding than that (its notification window), so the peer
//   never meets an empty receive queue; the queue pair retries no RNR (its
//   rnr_retry is 0), so an engine that overran would break the connection,
//   not stall it.
// - The receive ring is mapped and registered here, at setup, so that its
//   address and key can travel in the connect's private data; the Stream's
//   map_receive_ring and its remote_write registration of the ring take them
//   over (they must ask for exactly options.ring_size).
// - The wait handle is an epoll set of the completion channel's fd and the
//   rdma_cm event channel's fd (both non-blocking): a sleeper wakes on a
//   completion after arm() (ibv_req_notify_cq), and on the peer's disconnect
//   or death (the kernel's CM sends a DREQ when a process holding a
//   connected id exits). poll() consumes both: ibv_get_cq_event and
//   ibv_ack_cq_events while armed, and the CM's events after an arm and on
//   the busy path once per tick of the coarse clock (read every eighth
//   poll). A DISCONNECTED event moves the queue pair to the error state,
//   which flushes everything with errors, so the engine learns of it from a
//   completion.
// - The first failed completion (or DISCONNECTED, or a failed re-post)
//   breaks the link: the queue pair goes to the error state, later posts fail
//   with -ECONNRESET, every outstanding post completes with -ECONNRESET, and
//   one `arrived` completion with -ECONNRESET stands for the flushed receives.
// - disconnect() moves the queue pair to the error state (the peer loses
//   access to our memory at once) and calls rdma_disconnect; idempotent.
//
// Threads: posts, polls, arm and disconnect are serialized by the engine;
// register_memory and deregistration may run beside them (ibv_reg_mr and
// ibv_dereg_mr are thread-safe; the ring's hand-over takes a lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>

#include "common/unique_fd.h"
#include "stream/mapped_memory.h"
#include "stream/stream.h"
#include "stream/transport.h"
#include "transport/verbs/post_ledger.h"
#include "transport/verbs/verbs_handles.h"
#include "transport/verbs/verbs_options.h"
#include "transport/verbs/verbs_registration.h"

namespace qpsock::transport::verbs {

// The most scatter/gather entries one post carries (the queue pair's
// max_send_sge is capped to it).
inline constexpr uint32_t kLargestSlices = 32;
// Receives posted beyond the notification capacity, and how many consumed
// ones are posted again at once.
inline constexpr uint32_t kSpareReceives = 16;

class VerbsTransport final : public stream::Transport {
  struct ConstructionKey {
    explicit ConstructionKey() = default;
  };

 public:
  // For the connector and the listener: sets up everything one connection
  // needs on the device `id` is bound to (its route or its connect request
  // resolved it): protection domain, completion channel and queue, the queue
  // pair (probing the inline size), the receive ring and its registration,
  // the posted receives and the wait handle. Takes both. 0 or -errno.
  static int create(EventChannel events, CmId id, const VerbsOptions& options,
                    std::unique_ptr<VerbsTransport>& out);

  VerbsTransport(ConstructionKey, EventChannel events, CmId id);
  ~VerbsTransport() override;
  VerbsTransport(const VerbsTransport&) = delete;
  VerbsTransport& operator=(const VerbsTransport&) = delete;

  // Hands over the ring made at setup: `length` must be options.ring_size.
  int map_receive_ring(size_t length, stream::MappedMemory& ring) override;
  int register_memory(void* address, size_t length, stream::MemoryAccess access,
                      std::unique_ptr<stream::MemoryRegistration>& registration) override;
  int post_write(std::span<const stream::LocalSlice> source, stream::RemoteRegion destination,
                 std::optional<uint32_t> immediate, uint64_t cookie) override;
  int post_read(std::span<const stream::LocalSlice> destination, stream::RemoteRegion source,
                uint64_t cookie) override;
  int poll(std::span<stream::Completion> completions) override;
  int poll_for_exit(std::span<stream::Completion> completions) override;
  bool link_up_for_exit() const override { return !broken_; }
  int wait_handle() const override { return wait_set_.get(); }
  int arm() override;
  void disconnect() override;
  size_t max_inline() const override { return max_inline_; }
  uint32_t max_outstanding_reads() const override { return max_outstanding_reads_; }
  uint32_t send_queue_depth() const override { return send_queue_depth_; }
  uint32_t notification_capacity() const override { return notification_capacity_; }
  uint32_t max_slices() const override { return max_slices_; }
  uint64_t max_read_length() const override { return max_read_length_; }

  // What we announce to the peer: our ring (the Stream's local_endpoint()
  // once it took the ring over).
  const stream::StreamEndpoint& local_endpoint() const { return local_endpoint_; }
  // Soft-RoCE (rdma_rxe; Linux 6.1 at least): a retransmitted multi-packet
  // RDMA read can move the queue pair to the error state (the completer takes
  // a stale read response for a protocol violation), which would reset the
  // stream. Retransmissions are routine there, so streams on it copy large
  // writes through the ring instead of pulling them by reads.
  bool reads_unreliable() const { return reads_unreliable_; }
  // The path MTU in bytes, once connected.
  uint32_t path_mtu() const { return path_mtu_; }
  // The device the connection runs on ("rxe0", "mlx5_0").
  const char* device_name() const;
  bool link_broken() const { return broken_; }
  bool peer_left() const override { return peer_left_; }

  // --- for the connector and the listener ---
  rdma_cm_id* cm_id() const { return id_.get(); }
  rdma_event_channel* cm_events() const { return events_.get(); }
  // Reads we may have in flight and the peer's we can serve, as the device
  // allows: the connect's initiator depth and responder resources.
  uint8_t reads_asked() const { return reads_asked_; }
  uint8_t reads_served() const { return reads_served_; }
  // After ESTABLISHED: reads what the connection negotiated (the initiator
  // depth, the path MTU). 0, or -EPROTO if we may not read at all.
  int complete_connection();

 private:
  // --- verbs_transport_setup.cc ---
  int set_up(const VerbsOptions& options);
  int create_queue_pair(const VerbsOptions& options);
  int map_ring(uint64_t ring_size);
  int open_wait_set();
  // Posts `count` zero-length receives for immediates: 0 or -errno.
  int post_receives(uint32_t count);

  // --- verbs_transport.cc ---
  int submit(ibv_send_wr& request, const PostLedger::Entry& entry);
  // Turns one work completion into the engine's; false if it yields none.
  bool translate(const ibv_wc& work, stream::Completion& completion);
  bool translate_receive(const ibv_wc& work, stream::Completion& completion);
  void replace_consumed_receives();
  void consume_wakeups();
  bool cm_check_due();
  void consume_cm_events();
  void note_failure(const ibv_wc& work);
  // The error state: flushes everything, refuses later posts.
  void break_link();

  // Declared in creation order: destroyed in the order the verbs require.
  EventChannel events_;
  CmId id_;
  ProtectionDomain domain_;
  CompletionChannel completion_channel_;
  CompletionQueue completion_queue_;
  QueuePair queue_pair_;
  UniqueFd wait_set_;
  std::mutex ring_mutex_;
  stream::MappedMemory ring_;  // ours until map_receive_ring hands it over
  std::unique_ptr<VerbsRegistration> ring_registration_;  // likewise, to register_memory
  stream::StreamEndpoint local_endpoint_{};
  PostLedger ledger_{1};

  size_t max_inline_ = 0;
  uint32_t send_queue_depth_ = 0;
  uint32_t notification_capacity_ = 0;
  uint32_t max_slices_ = 0;
  uint32_t max_outstanding_reads_ = 0;
  uint64_t max_read_length_ = 0;
  uint8_t reads_asked_ = 0;
  uint8_t reads_served_ = 0;
  uint32_t path_mtu_ = 0;
  bool reads_unreliable_ = false;

  bool broken_ = false;
  bool peer_left_ = false;  // a DISCONNECTED that our own disconnect did not cause
  bool disconnected_ = false;
  bool receive_failure_reported_ = false;
  // Receives consumed and not yet posted again (replace_consumed_receives).
  uint32_t consumed_receives_ = 0;
  bool failure_logged_ = false;
  bool completion_armed_ = false;    // a completion event may be in the channel
  bool cm_check_requested_ = false;  // arm() was called: the sleeper may wake for a CM event
  int64_t cm_checked_at_ = 0;        // coarse clock, nanoseconds
  static constexpr uint32_t kPollsPerClockRead = 8;
  uint32_t polls_since_clock_read_ = 0;
};

}  // namespace qpsock::transport::verbs
