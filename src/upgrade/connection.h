// One TCP connection that qpsock may upgrade, and once upgraded, its stream:
// the object every data call on the socket goes through (docs/upgrade-protocol.md).
//
// Each direction switches on its own. The sender switches at its next write
// once both ends have the stream installed: it sends a SwitchHeader with its
// exact count of TCP bytes on the stream, then writes the peer's binding token
// into TCP, and from then on writes to the stream. The receiver delivers
// exactly that many bytes from TCP, reads and checks the token, then reads the
// stream. The header is visible on the stream before the token can arrive in
// TCP, so a TCP read that returns token bytes always finds the header and
// trims them off; nothing of qpsock's ever reaches the application.
//
// No lock is held across a blocking call: TCP reads are non-blocking under
// receive_mutex_, and a blocking reader waits in poll(2) outside it.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>

#include "common/kept_fd.h"
#include "config/rule.h"
#include "stats/connection_stats.h"
#include "stream/function_ref.h"
#include "stream/stream.h"
#include "upgrade/handshake_messages.h"

namespace qpsock::upgrade {

enum class UpgradePhase : uint8_t {
  offered,      // the client listens / the server tries at its first I/O
  negotiating,  // the handshake runs
  established,  // the stream is installed: the peer may switch at any time
  declined,     // stays on TCP for good
};

// How many streams this process has installed so far: the epoll layer looks
// for newly upgraded sockets in its sets only when this moved.
uint64_t stream_installations();

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  explicit Connection(config::Role role);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  config::Role role() const { return role_; }
  // Tells this connection from every other the process ever had (a number
  // may be closed and reused, an address freed and reused).
  uint64_t serial() const { return serial_; }
  UpgradePhase phase() const { return phase_.load(std::memory_order_acquire); }
  // offered -> negotiating; false if another thread already started (or it is over).
  bool begin_negotiation();
  // The server's attempt belongs to this process from its first I/O on: true
  // once, for the call that makes it. Over RDMA the attempt begins
  // (begin_negotiation) only rdma_upgrade_delay later, in the upgrade
  // worker; until then the phase stays offered, so that a child forked
  // meanwhile, or a descriptor passed meanwhile, keeps TCP rather than a
  // negotiation it cannot follow.
  bool claim_server_attempt();
  // Whether this process has forked (or started a program) since the
  // attempt was claimed, or was forking as it was claimed: the child, or a
  // child of its that outlives it, may use the socket over TCP out of this
  // process's sight, so the attempt declines when it would begin
  // (forked_children.h). Looked at after begin_negotiation: a fork counted
  // later copies a phase that is no longer offered.
  bool forked_since_claimed() const;
  // A claim made before the process has a worker thread (a forked child, or
  // the process's first connection): kept here, and handed to a worker only
  // if the connection still does I/O once it is due, or streams
  // (socket_upgrade.cc), so that a process whose connection ends sooner (a
  // database backend's one transaction) never starts a thread for it.
  // Lock-free.
  void defer_claim(std::chrono::steady_clock::time_point claimed_at);
  // The deferred claim's time, taken (once) if it was made at or before
  // `due_if_claimed_by`.
  std::optional<std::chrono::steady_clock::time_point> take_deferred_claim(
      std::chrono::steady_clock::time_point due_if_claimed_by);
  bool has_deferred_claim() const { return deferred_claim_at_.load(std::memory_order_acquire) != 0; }
  // Stays on TCP for good; `reason` (a string literal) goes to qpsock-stat.
  void decline(const char* reason);
  // The same, only if no handshake has begun (a handshake's thread installs
  // its stream whatever another thread decided): false otherwise.
  bool decline_if_offered(const char* reason);
  // The statistics row of the connection (the socket layer records it once
  // connect or accept has succeeded, which may be after the upgrade ended):
  // the Connection keeps its path and counts the bytes it moves on each.
  void attach_statistics(stats::Handle handle);
  // Drawn by begin_negotiation.
  const BindingToken& expected_token() const { return expected_token_; }
  // Installs the stream (the shm handshake's last step before "ready"): the
  // peer's token came over the side channel, and "ready" will say when the
  // peer has installed its own. `path` is the transport's, for qpsock-stat.
  void install(std::unique_ptr<stream::Stream> stream, const BindingToken& peer_token, KeptFd tcp,
               stats::Path path);
  // The peer has installed its stream too: our sending direction may switch.
  void allow_send_switch() { send_switch_allowed_.store(true, std::memory_order_release); }
  // Installs a stream that has no side channel beside it (the verbs path),
  // then sends our Hello, with our token, as the first bytes of our
  // direction: it tells the peer that we installed (so the token it will
  // write into TCP is trimmed, never delivered) and what to write. The
  // peer's Hello, first on its direction, tells us the same; our sending
  // direction may switch once both Hellos are through. Reads take the peer's
  // Hello before its SwitchHeader; so do writes while it is awaited, so that a
  // program that only writes still switches. 0, or -errno if our Hello could
  // not be sent (then neither side ever switches: the connection stays on TCP).
  int install_announced(std::unique_ptr<stream::Stream> stream, KeptFd tcp, stats::Path path);

  // The data path: results as the socket calls give them (count, or -1 with errno).
  ssize_t send(int fd, std::span<const iovec> data, int flags);
  ssize_t receive(int fd, std::span<const iovec> buffers, int flags);
  // sendfile or splice into the socket: `kernel_send` (the kernel's own
  // call, which moves file bytes without copying them) while the sending
  // direction is on TCP, counted as any TCP write; nullopt once it has
  // switched (the caller copies the bytes into the stream).
  std::optional<ssize_t> send_by_kernel(int fd, stream::FunctionRef<ssize_t()> kernel_send);

  bool switched() const { return sending_switched() || receiving_switched(); }
  bool sending_switched() const { return send_switched_.load(std::memory_order_acquire); }
  bool receiving_switched() const { return receive_switched_.load(std::memory_order_acquire); }
  // For poll and epoll, when the receiving direction has not switched and
  // TCP is readable: if what TCP holds is the binding token (and no byte
  // before it), takes it now, so that readiness to read is the stream's (a
  // plain socket is never readable without a byte for the application).
  // Never waits: a reader at work keeps it. True if the direction switched.
  bool settle_receive_switch(int fd);
  // Null until established.
  stream::Stream* stream() const { return stream_installed_.load(std::memory_order_acquire); }

  // Bytes this end moved over TCP, both directions, while its upgrade was
  // still offered (a delayed upgrade begins early once enough moved).
  uint64_t offered_tcp_bytes() const { return offered_tcp_bytes_.load(std::memory_order_relaxed); }

  // Server: the client's socket inode, once found on this host (a socket's
  // peer never changes, so one SOCK_DIAG query serves every later look); 0
  // until then.
  void note_client_inode(uint64_t inode) { client_inode_.store(inode, std::memory_order_relaxed); }
  uint64_t client_inode() const { return client_inode_.load(std::memory_order_relaxed); }

  // FIONREAD / SIOCINQ: the application's bytes waiting to be read.
  int readable_bytes(int fd, int& bytes);
  // SIOCOUTQ / TIOCOUTQ: bytes written and not yet taken by the peer.
  int unsent_bytes(int fd, int& bytes);
  // getsockopt(SO_ERROR): the stream's pending error if it has one (taken,
  // as the kernel clears it), else the kernel's.
  int take_error(int fd, int& error);
  // shutdown(2) on the socket: mirrors onto the stream where switched.
  int shutdown(int fd, int how);
  // The last fd of this process on the socket is closing: flush and end the
  // stream; true when the application left data unread (close resets then).
  bool close_stream();
  // Just before the kernel closes the socket at `fd` (the last number of it
  // anywhere): qpsock's own bytes waiting in it (the peer's binding token
  // right after the last application byte, doorbells) are read, so that the
  // close sends TCP's FIN, not the reset that unread bytes cause. Bytes of
  // the application's still unread are left: TCP resets for those.
  void take_own_bytes_before_close(int fd);
  // The same for an _exit, perhaps in a signal handler: no lock, so only the
  // doorbells, and only once the receiving direction switched.
  void take_doorbells_before_exit(int fd);

  // In a forked child, on its copy of a connection the parent had upgraded:
  // the stream's queue pair, registrations and rings belong to the parent
  // (over RDMA the child even shares the verbs context, so a post, a poll or
  // a destructor here would act on the parent's connection), and another
  // thread may have held its locks at the fork. The child lets the stream go
  // without touching it (its memory stays allocated) and its calls on the
  // connection fail with ECONNRESET; close and exec leave the parent's
  // connection as it is. The same for an upgrade under way at the fork (a
  // thread of the parent's finishes it). A server's attempt the parent has
  // claimed and not begun is the parent's too, but the child's copy stays on
  // TCP: the parent, seeing the fork (forked_since_claimed), declines it as
  // well when it would begin. Idempotent; runs in the child before any other call.
  void abandon_inherited_stream();
  // A socket a new program inherited across exec from such a child
  // (upgrade/inherited_streams.h): refused alike, and it has no stream here.
  void mark_inherited_stream() { inherited_stream_.store(true, std::memory_order_release); }
  bool inherited_stream() const { return inherited_stream_.load(std::memory_order_acquire); }
  // The timer thread's calls (connection_timers.h): announce what MSG_MORE
  // corked; ask the peer for room if the stream's writer still waits for it.
  void flush_cork();
  void ask_for_room();
  // The stream's writer found no room: ask_for_room after `patience`.
  void schedule_room_request(std::chrono::steady_clock::duration patience);
  // The doorbell watcher's call (doorbell_watcher.h): the TCP socket became
  // readable; take the peer's doorbells and let the stream answer it.
  void answer_doorbell();
  // The end of stream a shutdown(SHUT_WR) left waiting went: the kernel's
  // half-close now (any thread, under the stream's state lock).
  void send_deferred_fin();
  // setsockopt(SO_RCVLOWAT) on the socket: the stream, if installed, takes it.
  void receive_low_water_changed(int tcp_fd);
  // The number the stream watches for the peer's doorbells, FIN and reset
  // (the socket's fd when installed, kept: common/kept_fd.h); empty before.
  KeptFd control() const { return control_.load(std::memory_order_acquire); }
  // `fd` no longer refers to the socket in this process, or is about to stop
  // (closed, or another file dup2'ed over it): if the stream watched `fd`, it
  // watches another fd of the socket from now on (if one is left).
  void control_fd_left(int fd);

  // How many of this process's fds refer to the connection (dup shares it);
  // kept by the registry.
  void fd_attached() { attached_fds_.fetch_add(1, std::memory_order_acq_rel); }
  void fd_detached() { attached_fds_.fetch_sub(1, std::memory_order_acq_rel); }
  uint32_t attached_fds() const { return attached_fds_.load(std::memory_order_acquire); }

 private:
  ssize_t send_over_tcp(int fd, std::span<const iovec> data, int flags);
  // The application's call on `fd` moved `bytes` over TCP: counted while
  // the upgrade is offered, and socket_upgrade.h told when enough moved.
  void count_offered_tcp_bytes(int fd, ssize_t bytes);
  // The application's write on TCP, with the send gate held so that the
  // switch never falls inside it and tcp_sent_ is exact: `kernel_send`'s
  // result, or nullopt if the direction switched first.
  std::optional<ssize_t> send_through_gate(stream::FunctionRef<ssize_t()> kernel_send);
  // What send and send_by_kernel do first: the peer's Hello, the switch.
  void prepare_to_send(int fd);
  // The kernel's SO_RCVLOWAT for the socket, given to the stream.
  static void copy_receive_low_water(int tcp_fd, stream::Stream& stream);
  // Just declined: the reason kept, the path reported.
  void record_decline(const char* reason);
  // A TCP reset (or timeout) is reported once: the read that sees it clears
  // the socket's error, and later ones read end of file, as for the peer's
  // FIN. So the error the control channel read (`state` gone, `error`) is
  // kept: whoever looks at the control channel next still hears "gone", not
  // an orderly end, and the application's next call on TCP reports it once
  // (take_remembered_tcp_error), as the kernel would have.
  stream::ControlState remember_tcp_error(stream::ControlState state, int error);
  // The application's own call took the socket's error (ECONNRESET,
  // ETIMEDOUT or ECONNABORTED, which end a connection; others are ignored):
  // nothing left to report.
  void application_saw_tcp_error(int error);
  // The error the control channel took from the socket, if the application
  // has not been told yet (then it is, by this call); 0 otherwise.
  int take_remembered_tcp_error();
  ssize_t send_over_stream(std::span<const iovec> data, int flags, stream::Blocking blocking);
  void try_switch_sending(int fd);
  ssize_t receive_discarding(int fd, size_t length, int flags);
  // `socket` is the call's fd, kept at its start (common/kept_fd.h): the
  // reads after a wait are made under an FdUse, never on a number that the
  // application closed meanwhile.
  ssize_t receive_once(KeptFd socket, std::span<const iovec> buffers, int flags,
                       stream::Blocking& blocking);
  ssize_t receive_from_stream(std::span<const iovec> buffers, int flags, stream::Blocking& blocking);
  // Reads the peer's Hello (when awaited) and then the SwitchHeader off the
  // stream, as far as they have arrived.
  void learn_switch_point_locked();
  // The verbs path: the peer's Hello, if it has arrived. True once taken.
  // A stream that broke before it came (the peer gave up its side of the
  // upgrade: its accept timed out, its process ended) is given up.
  bool take_peer_hello_locked(stream::Stream& current);
  // The installed stream will never carry a byte: neither direction has
  // switched, nor can now. The connection stays on TCP, and qpsock-stat and
  // the log say why (`reason`, a string literal) instead of "upgraded".
  void give_up_unswitched_stream(const char* reason);
  // A writer looks for the peer's Hello (it may be the only thread that ever
  // comes by while the Hello is awaited).
  void look_for_peer_hello();
  // One of the two Hellos is through; the second allows our send switch.
  void hello_done();
  // Reads the rest of the binding token from TCP: 1 done, 0 not yet, -errno.
  int take_token_locked(int fd);
  void stash_token_bytes_locked(std::span<const iovec> buffers, size_t from, size_t count);
  // Tells the statistics row the path the phase implies (idempotent: both
  // the phase change and attach_statistics call it, in either order).
  void report_path();
  void count_sent(ssize_t bytes, stats::Path path) const {
    if (bytes > 0) stats::add_sent(statistics_.load(std::memory_order_acquire), static_cast<uint64_t>(bytes), path);
  }
  void count_received(ssize_t bytes, stats::Path path) const {
    if (bytes > 0) stats::add_received(statistics_.load(std::memory_order_acquire), static_cast<uint64_t>(bytes), path);
  }
  // The stream has moved `total` bytes of `direction` zero-copy so far: the
  // statistics get what they have not been told yet, each byte once
  // whichever thread tells them.
  void count_zero_copy(stats::Direction direction, uint64_t total);

  // A call on a connection inherited from the process that upgraded it: logs
  // one error line per connection and returns the errno to fail with.
  int refuse_inherited_call(int fd);

  const config::Role role_;
  const uint64_t serial_;
  std::atomic<uint32_t> attached_fds_{0};
  std::atomic<bool> inherited_stream_{false};
  std::atomic<bool> inherited_call_logged_{false};
  std::atomic<UpgradePhase> phase_{UpgradePhase::offered};
  std::atomic<bool> server_attempt_claimed_{false};
  // The forks begun when the attempt was claimed; kForkedWhileClaiming if
  // one was under way then.
  static constexpr uint64_t kForkedWhileClaiming = ~uint64_t{0};
  std::atomic<uint64_t> forks_at_claim_{0};
  std::atomic<uint64_t> offered_tcp_bytes_{0};
  std::atomic<uint64_t> client_inode_{0};
  // steady_clock ticks of a deferred claim; 0: none.
  std::atomic<std::chrono::steady_clock::rep> deferred_claim_at_{0};
  std::atomic<stats::Handle> statistics_{0};
  std::atomic<uint64_t> zero_copy_counted_[2] = {};  // [stats::Direction]
  std::atomic<const char*> decline_reason_{nullptr};
  // The path of the stream's bytes (the transport's kind).
  stats::Path offloaded_path_ = stats::Path::shm;
  BindingToken expected_token_{};  // the peer writes it into TCP to us
  BindingToken peer_token_{};      // we write it into TCP to the peer
  std::unique_ptr<stream::Stream> stream_;
  std::atomic<stream::Stream*> stream_installed_{nullptr};
  std::atomic<KeptFd> control_{KeptFd{}};
  std::mutex control_move_mutex_;

  // The verbs path: the Hellos still to go through (ours sent, the peer's
  // taken) before our sending direction may switch; the peer's is awaited.
  std::atomic<uint32_t> hellos_left_{0};
  std::atomic<bool> peer_hello_awaited_{false};
  // give_up_unswitched_stream: the stream stays installed (another thread
  // may be looking at it) but is never switched to.
  std::atomic<bool> stream_given_up_{false};

  // Sending: the gate counts TCP writes in flight; the switch takes it from 0.
  static constexpr uint32_t kGateClosed = 1u << 31;
  std::atomic<uint32_t> send_gate_{0};
  std::atomic<bool> send_switch_allowed_{false};
  std::atomic<bool> send_switched_{false};
  std::atomic<bool> cork_flush_scheduled_{false};
  std::atomic<bool> room_ask_scheduled_{false};
  // The socket's error the control channel or the application read (0:
  // none), and whether the application was told (remember_tcp_error).
  std::atomic<int> tcp_error_seen_{0};
  std::atomic<bool> tcp_error_reported_{false};
  std::atomic<uint64_t> tcp_sent_{0};

  // Receiving.
  std::mutex receive_mutex_;
  uint64_t tcp_received_ = 0;
  int64_t switch_point_ = -1;  // the peer's TCP byte count at its switch, once known
  BindingToken token_received_{};
  size_t token_bytes_ = 0;
  std::atomic<bool> receive_switched_{false};
};

}  // namespace qpsock::upgrade
