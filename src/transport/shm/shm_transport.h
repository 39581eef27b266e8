// The same-host transport: stream::Transport between two processes on one
// host, over memory only the two of them share. What the upgrade layer calls
// is ShmTransport::establish(); then Stream::create(transport, ...) runs the
// engine over it unchanged.
//
// How it maps the RC queue-pair model (docs/stream-engine.md, "shm transport"):
// - Each endpoint takes an *arena* (arena_layout.h) from its pool with the
//   peer process (link_pool.h: one memfd per process and peer, shared by
//   all their channels): its control block and registration table, its
//   inbox of immediates, and its receive ring. The first channel between
//   two processes (establish) passes each side's pool over the side channel
//   (SCM_RIGHTS); later ones (open_on_link) only tell each other where
//   their arenas lie, in the link's mailbox (link_channels.h). No name in
//   /dev/shm; the memory goes when both processes have let go of the pool
//   (or died).
// - post_write is a memcpy into the peer's ring (the engine maps its ring
//   through map_receive_ring, so it lies in our arena) and, with an
//   immediate, a push into the peer's inbox and a release store: no system
//   call unless the peer sleeps armed, and then one write of its link's
//   doorbell (link_doorbell.h). max_inline() is unlimited, so every
//   eager write is one copy straight from the application's buffer.
// - post_read of a peer's remote_read registration outside its arena (a
//   rendezvous source: the application's own buffer) is one process_vm_readv
//   straight into the destination slices.
// - Every remote access is checked against the registration table the peer
//   published (key, access, bounds); deregistration revokes at once. A
//   violation, an immediate beyond the peer's notification capacity (RDMA's
//   RNR), a disconnect or the death of either side breaks the link: later
//   posts complete with errors and each side's poll returns one error
//   completion. Posts and reads finish at post time; their completions are
//   queued until polled.
// - remote_write registrations must lie in the ring map_receive_ring gave:
//   the peer only ever writes into the shared memfd, never (by
//   process_vm_writev) into private memory that a racing deregistration
//   could hand back to the allocator.
// - There is no wait handle. A sleeping thread that is a stream's only
//   sleeper arms with its own waker, which the peer then writes (taking it
//   once per link with pidfd_getfd, wakeup.h); otherwise the link's
//   doorbells (link_doorbell.h) tell the stream, as its WakeupListener, on
//   the background loop's thread. So it hears of a completion after arm(),
//   and of the peer's death, which the loop sees on the pidfd that every
//   transport with that process shares (peer_process.h). The peer's pid is never used without its pidfd
//   confirming it is still the peer (pid reuse). A connection holds no
//   descriptor: the hellos carry each side's doorbell and wake page, kept
//   once per link.
//
// fork: the arenas are MAP_SHARED, so a forked child shares them with its
// parent. A child must not touch them: every call of a transport inherited
// across fork (detected with one load of a MADV_WIPEONFORK page, see
// process_page.h) fails (-EPIPE from poll and posts, -ECONNRESET from
// register_memory) and its destructor only drops its own mappings and fds,
// so the child can neither corrupt nor close the parent's connection. The
// child's copy is unusable (a stream over it breaks at its first call; bytes
// the parent had announced before the fork may still be readable in the
// shared ring, but the parent owns them). We do not use MADV_DONTFORK: the
// child's RAII owners would then munmap address ranges that its own later
// mappings may occupy. The mappings a child inherits keep the memory alive
// until it exits or closes the inherited socket.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "common/unique_fd.h"
#include "stream/function_ref.h"
#include "stream/transport.h"
#include "transport/shm/completion_queue.h"
#include "transport/shm/immediate_queue.h"
#include "transport/shm/local_arena.h"
#include "transport/shm/peer_arena.h"
#include "transport/shm/peer_process.h"
#include "transport/shm/pool_header.h"
#include "transport/shm/process_page.h"
#include "transport/shm/ptracer_grant.h"
#include "transport/shm/registration_table.h"
#include "transport/shm/wakeup.h"

namespace qpsock::transport::shm {

// Which end of the upgrade we are (the client that connected is the
// initiator). Each side must say the other's role: a mismatch fails setup.
enum class ShmRole : uint32_t { initiator = 1, responder = 2 };

struct ShmOptions {
  // The largest receive ring this side's Stream will map: pass the
  // StreamSettings::ring_size the Stream is created with (at most 1 GiB).
  uint64_t ring_size = uint64_t{1} << 20;
  // Immediates we hold unpolled (the peer never sends more).
  uint32_t notification_capacity = 1024;
  // Posts awaiting their completion at once.
  uint32_t send_queue_depth = 1024;
  uint32_t max_outstanding_reads = 16;
  uint32_t max_slices = 16;  // 4 .. 64
  // How long establish() waits for the peer's messages.
  std::chrono::milliseconds setup_timeout{2000};
};

class ShmTransport final : public stream::Transport, private PeerExitListener {
  struct ConstructionKey {
    explicit ConstructionKey() = default;
  };

 public:
  // Sets up the transport with the process at the other end of
  // `side_channel_fd`, a connected AF_UNIX SOCK_STREAM socket (blocking or
  // not; we never change its flags). Both processes call it, one as
  // initiator, one as responder, at about the same time. `peer_pid` is the
  // peer's pid as this process sees it (SO_PEERCRED).
  //
  // On the socket, each side sends exactly one 56-byte hello carrying its
  // arena memfd and its link's doorbell and wake page (SCM_RIGHTS), then, if both hellos were good, one
  // 4-byte verdict on whether it can read the other's memory; each reads the
  // same from the peer, never more, so the socket is positioned for the
  // caller's next message when establish returns (success or not, unless the
  // socket itself failed or timed out).
  //
  // Returns 0 with `out` set, or -errno with one warning logged saying why
  // shm is unavailable; the caller then keeps the connection on TCP:
  //   -EINVAL     bad options or arguments
  //   -EPERM      the kernel will not let one side read the other's memory
  //               (Yama ptrace_scope >= 2, or 1 with another peer process
  //               already granted; different users; a non-dumpable process)
  //   -ESRCH      the peer process is gone
  //   -EPROTO     the peer's messages, arena or doorbell are malformed, or the
  //               roles clash
  //   -ENOSPC     the link with the peer process carries kLinkChannels already
  //   -ECONNREFUSED  the peer failed its side of setup
  //   -ETIMEDOUT  the peer did not answer within options.setup_timeout
  //   -ECONNRESET the side channel closed
  //   other       a system call failed (memfd_create, mmap, eventfd, pidfd_open)
  static int establish(int side_channel_fd, ShmRole role, pid_t peer_pid, const ShmOptions& options,
                       std::unique_ptr<ShmTransport>& out);

  // A channel on an existing link (one whose peer's pool a hello gave:
  // PeerProcess::peer_link): our side now, the peer's half later with
  // attach_half. 0, or -errno with one warning logged.
  static int open_on_link(std::shared_ptr<PeerProcess> link, const ShmOptions& options,
                          std::unique_ptr<ShmTransport>& out);
  // Our half for the peer (its endpoint fields left to the caller: the stream's).
  ChannelFacts half() const;
  // The peer's half, from its link message: maps its arena and proves it
  // the peer's (its probe word); 0, or -errno with one warning logged.
  int attach_half(const ChannelFacts& facts);

  ShmTransport(ConstructionKey, const ShmOptions& options);
  ~ShmTransport() override;
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  // Maps our ring in our arena (at most options.ring_size bytes, once).
  int map_receive_ring(size_t length, stream::MappedMemory& ring) override;
  int register_memory(void* address, size_t length, stream::MemoryAccess access,
                      std::unique_ptr<stream::MemoryRegistration>& registration) override;
  int post_write(std::span<const stream::LocalSlice> source, stream::RemoteRegion destination,
                 std::optional<uint32_t> immediate, uint64_t cookie) override;
  int post_read(std::span<const stream::LocalSlice> destination, stream::RemoteRegion source,
                uint64_t cookie) override;
  int poll(std::span<stream::Completion> completions) override;
  int poll_for_exit(std::span<stream::Completion> completions) override;
  bool link_up_for_exit() const override;
  int wait_handle() const override { return -1; }
  void set_wakeup_listener(stream::WakeupListener* listener) override;
  int arm() override;
  int arm_for_sleeper(int sole_sleeper_fd) override;
  void disconnect() override;
  size_t max_inline() const override;
  uint32_t max_outstanding_reads() const override { return options_.max_outstanding_reads; }
  uint32_t send_queue_depth() const override { return options_.send_queue_depth; }
  uint32_t notification_capacity() const override { return options_.notification_capacity; }
  uint32_t max_slices() const override { return options_.max_slices; }
  void publish_consumed(uint64_t ring_bytes) override;
  std::optional<uint64_t> peer_consumed() const override;
  bool peer_may_share_core() const override { return true; }
  // The peer closed its end or its process ended: its kernel sends the TCP
  // connection's FIN or RST too, but it may not have been processed yet when
  // the close or the pidfd wakes us.
  bool peer_left() const override { return peer_left_; }

  pid_t peer_pid() const { return peer_ != nullptr ? peer_->pid() : -1; }
  // Whether the link is broken (a disconnect, a violation, the peer's end).
  bool link_broken() const { return broken_; }

 private:
  // Wakes a sleeper to find the link failed (PeerExitListener).
  void peer_exited() override;

  // --- shm_establish.cc ---
  // The shared peer process, our slot on its link and our arena; 0 or -errno.
  int set_up_local(pid_t peer_pid);
  int set_up_with_peer();
  // What the peer's hello brought (its fds, in order: pool, doorbell, wake page).
  struct PeerHello {
    UniqueFd fds[3];
    uint64_t arena_offset;
    uint64_t arena_size;
    uint64_t probe_address;
    uint64_t link_id;
    uint32_t wake_slot;
  };
  // Maps the peer's arena (from the link's pool, or the hello's for a new
  // link), takes its doorbell, and proves, by reading its probe word with
  // process_vm_readv, that the pid is the arena's owner and readable.
  int attach_peer(PeerHello& hello);
  // The arena part of it: 0 or -errno.
  int attach_arena(std::shared_ptr<PeerPool> pool, uint64_t offset, uint64_t size,
                   uint64_t probe_address);

  // --- shm_transport.cc ---
  bool in_owner_process() const { return in_epoch(page_, epoch_); }
  // A post: done at once by `deliver`, whose status its completion carries
  // (a failure breaks the link); 0, or -errno with nothing done.
  int post(stream::CompletionKind kind, size_t slice_count, uint64_t cookie,
           stream::FunctionRef<int()> deliver);
  // The peer's side of a post: 0, or -errno.
  int deliver_write(std::span<const stream::LocalSlice> source, stream::RemoteRegion destination,
                    std::optional<uint32_t> immediate);
  int deliver_read(std::span<const stream::LocalSlice> destination, stream::RemoteRegion source);
  // Queues our completion of a post; wakes another of our threads if armed.
  void complete(const stream::Completion& completion);
  // Wakes the sleeper that armed our end, or the peer's.
  void wake_own_sleeper();
  void wake_peer_sleeper();
  // Whether the peer process still runs the program that made its arena
  // (an exec replaces its descriptors too).
  bool peer_runs_same_image() const;
  // The peer's immediates, as arrival completions, while there is room:
  // how many.
  size_t pop_arrivals(std::span<stream::Completion> completions);
  // Whether the link has failed (noticing the peer's disconnect or death).
  bool link_failed();
  void break_link();

  ShmOptions options_;
  ProcessPage* page_ = nullptr;
  uint64_t epoch_ = 0;
  PtracerGrant grant_;
  std::shared_ptr<PeerProcess> peer_;  // shared with every transport to that process
  int64_t own_slot_ = -1;              // ours on the link's OwnDoorbell
  std::shared_ptr<LocalArena> local_;
  std::shared_ptr<RegistrationPublisher> publisher_;
  std::unique_ptr<PeerArena> peer_arena_;  // unmapped when the link breaks
  std::optional<uint64_t> peer_consumed_at_break_;  // its published count, read before unmapping
  std::shared_ptr<PeerDoorbell> peer_doorbell_;     // shared with the link's other channels
  uint32_t peer_slot_ = 0;                          // this channel's on the peer's
  uint64_t peer_probe_address_ = 0;                 // its probe word, in its memory
  std::atomic<int> own_sleeper_fd_{-1};             // the waker our last arm named
  ImmediateSender outbox_;
  ImmediateReceiver inbox_;
  CompletionQueue completions_;
  bool broken_ = false;
  bool peer_left_ = false;
  bool failure_reported_ = false;
  bool listening_for_exit_ = false;  // subscribed to peer_
};

}  // namespace qpsock::transport::shm
