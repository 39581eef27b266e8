// One upgraded TCP connection's byte stream, both directions, over a
// Transport: the object the socket layer owns per upgraded connection. Its
// calls give the results a kernel TCP socket gives (counts, -errno).
//
// Locks: send_mutex_ serializes senders, receive_mutex_ serializes receivers,
// state_mutex_ guards the shared bookkeeping and every post/poll on the
// transport. Order: send or receive, then state. None is held while a thread
// sleeps; a blocking call spins (SpinBudget), then sleeps in poll(2) on the
// transport's wait handle (if it has one: else the transport writes the
// waker, or tells the stream, its WakeupListener), the thread's waker and
// the control fd.
#pragma once

#include <poll.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "common/futex_mutex.h"
#include "stream/core_sharing_backoff.h"
#include "stream/credit_window.h"
#include "stream/blocking.h"
#include "common/kept_fd.h"
#include "stream/control_doorbell.h"
#include "stream/eager_sender.h"
#include "stream/function_ref.h"
#include "stream/mapped_memory.h"
#include "stream/notification.h"
#include "stream/notification_window.h"
#include "stream/registration_provider.h"
#include "stream/rendezvous_receiver.h"
#include "stream/rendezvous_sender.h"
#include "stream/ring_layout.h"
#include "stream/spin_budget.h"
#include "stream/stream_settings.h"
#include "stream/transport.h"
#include "stream/readiness_signal.h"
#include "stream/byte_backlog.h"
#include "stream/wake_signal.h"

namespace qpsock::stream {

// What the peer needs to send to us; the upgrade protocol carries it across.
struct StreamEndpoint {
  uint64_t ring_address;
  uint32_t ring_key;
  uint64_t ring_size;
  uint32_t notification_capacity;
};

// What the TCP control connection's readiness meant, as the socket layer
// judges it (a stream call waiting saw POLLIN/POLLHUP/POLLERR on it).
enum class ControlVerdict : uint8_t {
  keep_waiting,     // handled (the handler consumed what made the fd ready)
  stop_watching,    // nothing to act on, and the fd will stay ready: stop polling it
  connection_lost,  // the peer is gone: the stream is broken (ECONNRESET)
};
// Called without any stream lock held, possibly from several waiting threads.
using ControlEventHandler = std::function<ControlVerdict(short revents)>;
// What the control socket says now (stream/control_doorbell.h): the peer's
// kernel closed the TCP connection in order (end_of_file), reset it (gone),
// or nothing yet (quiet). Called under the stream's state lock: it must not
// wait or call into the stream.
using ControlProbe = std::function<ControlState()>;

// How much went by rendezvous (zero-copy), for statistics and tests.
struct RendezvousCounts {
  uint64_t sent = 0;             // our rendezvous the peer took whole
  uint64_t bytes_sent = 0;
  uint64_t received = 0;         // the peer's rendezvous we took whole
  uint64_t bytes_received = 0;
  uint64_t pieces_pulled = 0;    // reads we posted, or write requests we sent
};

struct CloseResult {
  size_t unread_bytes;  // data the application never read: reset the TCP connection, as TCP does
  int error;            // 0, or -errno if the last writes could not be flushed
  // Bytes of the send backlog the peer never gave room for: the peer must
  // not read an orderly end after the bytes it got (reset the connection).
  uint64_t lost_bytes;
};

class Stream final : private WakeupListener {
  struct ConstructionKey {
    explicit ConstructionKey() = default;
  };

 public:
  // Maps and registers our receive ring. `registrations` may be null: then
  // every rendezvous buffer is registered directly with the transport.
  static int create(std::unique_ptr<Transport> transport, const StreamSettings& settings,
                    std::shared_ptr<RegistrationProvider> registrations,
                    std::unique_ptr<Stream>& stream);
  // Use create(); public only so that std::make_unique can reach it.
  Stream(ConstructionKey, std::unique_ptr<Transport> transport, const StreamSettings& settings,
         std::shared_ptr<RegistrationProvider> registrations);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  StreamEndpoint local_endpoint() const;
  // Starts the stream toward the peer's endpoint. Before it, calls give ENOTCONN.
  int connect(const StreamEndpoint& peer);
  // The TCP control socket, watched by every blocking wait while its number
  // is kept (common/kept_fd.h: once the application closed it, never). Set
  // before use. `probe` is asked when the link breaks without the peer's end
  // of stream (did its process end?); without one, the stream peeks at it.
  void set_control_channel(KeptFd control, ControlEventHandler handler, ControlProbe probe = {});
  // The application renumbered the socket (dup2, then close of the old
  // number): the control channel is now `control`, the same socket.
  void move_control_channel(KeptFd control);
  // Our sending direction switched (the peer's TCP bytes from us end with
  // the token): doorbells may follow on TCP. Until then a doorbell the
  // reader's side owes the peer (room_wanted) waits, since a byte we wrote
  // into TCP would be the application's. A stream that sends rings only
  // after its first send, which comes after the switch.
  void allow_doorbells();
  // Our receiving direction switched: we have read every byte the peer
  // sent over TCP, so its TCP send queue is empty. Until then the doorbell
  // that goes with returned credit waits (the peer's timer finds the room
  // meanwhile): a doorbell that reaches the peer's socket after its close
  // makes its kernel reset the connection, and the reset would throw away
  // what its send queue still holds for us.
  void allow_credit_doorbells();
  // The peer rang the doorbell (stream/control_doorbell.h): take in what it
  // sent and answer it, though no application thread calls in. Unless a
  // reader is in, the data at the head of our ring also moves into the
  // receive backlog (up to receive_backlog_limit) and its credit goes back:
  // a peer that rings while it waits for room gets it, as TCP's receive
  // queue takes what an application has not read yet. Unless a writer is
  // in, what our send backlog holds goes into the room the peer gave.
  void answer_peer();
  // Called once each time a writer finds the peer's ring full (a stall,
  // until credit comes), under the state lock: it must not call into the
  // stream or wait. Its owner calls ask_peer_for_room() room_patience later.
  using RoomWantedHandler = std::function<void()>;
  void set_room_wanted_handler(RoomWantedHandler handler);
  // If a stall has lasted room_patience with no credit, rings the peer's
  // doorbell (once per stall), so that its engine takes our bytes into its
  // backlog though its application does not read; and moves what the send
  // backlog holds into any room there is. How long until it wants to be
  // called again (a stall not due yet, or bytes still in the send backlog,
  // looked at less often the longer no room comes), or nullopt.
  std::optional<std::chrono::microseconds> ask_peer_for_room();
  std::chrono::microseconds room_patience() const { return settings_.room_patience; }

  // send(2)/sendmsg(2): MSG_DONTWAIT, MSG_MORE (defers the peer's notification
  // until the next call on this stream), MSG_NOSIGNAL is the socket layer's.
  // What the peer's ring has no room for goes into the send backlog (up to
  // send_backlog_limit), as TCP's send buffer takes it: at once for a
  // non-blocking send, after room_patience without credit for a blocking one.
  ssize_t send(std::span<const iovec> data, int flags, Blocking blocking);
  // recv(2)/recvmsg(2): MSG_PEEK, MSG_WAITALL, MSG_DONTWAIT.
  ssize_t receive(std::span<const iovec> buffers, int flags, Blocking blocking);

  size_t readable_bytes();  // FIONREAD
  // SO_RCVLOWAT: a blocking receive returns once this many bytes (or all it
  // asked for) are there, and readiness shows POLLIN only from this many on,
  // as TCP does. At least 1.
  void set_receive_low_water(size_t bytes);
  size_t unsent_bytes();    // SIOCOUTQ
  uint64_t send_backlog_bytes();  // held in the send backlog
  // Tells the peer now of every byte we have consumed, however few (credit
  // otherwise goes back by quarters of the ring, or before a reader sleeps).
  void return_credit_now();
  // Bytes sent with MSG_MORE that the peer has not been told of yet.
  bool holds_corked_bytes();
  // Tells the peer of them now (TCP's cork limit passed); true if some are
  // still held (no notification slot free: try again later).
  bool announce_corked_bytes();
  // poll(2) events as tcp_poll reports them: POLLIN|POLLRDNORM, POLLOUT|
  // POLLWRNORM, POLLRDHUP, POLLHUP, POLLERR. Progress::none looks at the
  // state as it is: a waiter that has armed must not poll the transport
  // before it sleeps, or a completion consumed then spends the arm.
  enum class Progress : uint8_t { make, none };
  short readiness(Progress progress = Progress::make);
  // shutdown(SHUT_WR), at once: the end of stream follows what the send
  // backlog holds. 0 if it went; 1 if it waits (for held bytes, or a
  // slot): the end-sent handler is called when it goes, and the TCP FIN,
  // which the peer reads as our end, must wait for it (TCP's FIN follows
  // the last byte of its send buffer too); or -ENOTCONN.
  int shutdown_write();
  // Called (under the state lock: it must not call into the stream or
  // wait) when an end of stream shutdown_write left waiting goes.
  using EndSentHandler = std::function<void()>;
  void set_end_sent_handler(EndSentHandler handler);
  int shutdown_read();
  // Flushes what was sent (the send backlog too, for as long as the peer
  // gives room at least every close_flush_timeout), ends our direction, and
  // disconnects the transport.
  CloseResult close();
  // The process ends without closing the socket (exit, _exit): a TCP
  // socket's kernel would still send what send took, but the transport goes
  // with the process. Announces corked bytes, returns credit, and waits
  // until `deadline` for every post to complete; the stream stays open (the
  // process's end closes it, and the peer then hears of its FIN). With
  // ExitCall::underscore_exit (perhaps in a signal handler, which may have
  // interrupted malloc, the transport, or this thread inside the stream) it
  // takes the state lock only by try_lock, posts only on a link that is up,
  // reaps with Transport::poll_for_exit, acts only on what completes our
  // own posts, stops at a failure, and gives up on the stream once nothing
  // has completed for a short while.
  // Bytes the send backlog holds wait past `deadline` while the peer keeps
  // taking them (a TCP writer would still be blocked in its write). False
  // if some could not go (no room for a minute): the connection must end
  // in a reset, not an orderly close after part of what was written.
  enum class ExitCall : uint8_t { exit, underscore_exit };
  bool deliver_before_exit(std::chrono::steady_clock::time_point deadline, ExitCall call);
  // Breaks the stream now (the socket is going away under other threads):
  // every waiting and later call returns at once.
  void abort();
  // SO_ERROR: the pending error (positive errno), cleared.
  int take_error();

  // For the readiness layer (poll/select/epoll over upgraded sockets): takes
  // in what has completed, then arms the transport so that the next
  // completion makes its wait handle readable, or wakes the sleepers
  // (armed again if one raced the arm).
  // Look at readiness(Progress::none) after it, then sleep. True if anything
  // completed. `waker`: the sleeping thread's, listed already with
  // begin_readiness_sleep (null for an epoll set's sleep).
  bool arm_for_readiness(ThreadWaker* waker = nullptr);
  // For the readiness layer: the fd a waiter for this stream polls, or -1
  // (the transport has none: the waker and the readiness signals hear).
  int transport_wait_handle() const { return transport_->wait_handle(); }
  // Around a poll(2) sleep that watches `waker`'s fd (the sleeping thread's,
  // ThreadSleep::waker()): another thread's progress may consume
  // the transport's wakeup this sleeper needed, and then wakes it through
  // its waker instead, as it wakes blocked readers and writers. The caller
  // consumes its waker after ending every stream's sleep.
  void begin_readiness_sleep(ThreadWaker* waker);
  void end_readiness_sleep(ThreadWaker* waker);
  // For epoll over upgraded sockets: `signal` hears of every change of this
  // stream's state that a thread of ours makes (a read that returned credit),
  // as the transport's wait handle tells of what the peer did.
  void add_readiness_signal(std::shared_ptr<ReadinessSignal> signal);
  void remove_readiness_signal(const ReadinessSignal* signal);
  // Counts the changes of state (data, credit, end, errors): edge-triggered
  // readiness is reported again only when this moved.
  uint64_t activity();
  // A readiness waiter saw `revents` on the TCP control socket: act on it as
  // a blocking wait would (a reset or a FIN before our end breaks the stream).
  void on_control_event(short revents);

  // Test and statistics hooks.
  uint32_t notifications_in_flight();
  RendezvousCounts rendezvous_counts();
  // RendezvousCounts' bytes_sent and bytes_received, without the lock (for
  // statistics kept per call).
  uint64_t rendezvous_bytes_sent() const { return rendezvous_bytes_sent_.load(std::memory_order_relaxed); }
  uint64_t rendezvous_bytes_received() const {
    return rendezvous_bytes_received_.load(std::memory_order_relaxed);
  }
  bool broken();

 private:
  using Clock = std::chrono::steady_clock;
  using StateLock = std::unique_lock<FutexMutex>;

  // --- stream_progress.cc: completions, notifications, breaking ---
  // Polls and acts on every completion; true if there were any.
  bool progress_locked();
  void dispatch_locked(const Completion& completion);
  void on_notification_locked(const Notification& notification);
  void scan_locked();
  void flush_notifications_locked();
  // The credit of everything consumed goes back, however little (before a
  // thread sleeps, and return_credit_now), so that the peer knows exactly
  // what we have read if our process then ends (peer_end_locked: TCP's FIN,
  // not a reset).
  void return_all_credit_locked();
  // Posts credit for `ring_bytes` consumed bytes if the peer may hear of it
  // now; false only if the post failed (the stream is broken).
  bool post_credit_locked(uint64_t ring_bytes);
  void flush_unnotified_locked();
  // Every post has completed and nothing waits to be sent or announced
  // (close and the process's exit wait for it).
  bool all_sent_locked() const {
    return posts_outstanding_ == 0 && unnotified_ring_bytes_ == 0 && !end_of_stream_pending_ &&
           send_backlog_bytes_ == 0 && !held_notice_;
  }
  bool post_notification_locked(NotificationKind kind, uint32_t value);
  bool send_queue_has_room_locked(uint32_t posts) const;
  // `why` goes to the debug log: the one place that says why a stream ended.
  void break_connection_locked(int pending_error, const char* why);
  // A post the transport refused (error < 0) ends the stream; the log says which.
  void post_failed_locked(const char* what, int error);
  void protocol_error_locked(const char* what);
  // RendezvousMethod::write, the sender's side: the peer asks for bytes of
  // one of our rendezvous (its request is in our box's `slot`); queued, and
  // posted by post_rendezvous_writes_locked as slots and queue entries allow.
  void on_write_request_locked(uint32_t slot);
  void post_rendezvous_writes_locked();
  // The receiver's side: the bytes asked for in `slot` landed.
  void on_written_locked(uint32_t slot);
  bool writes_rendezvous() const { return settings_.rendezvous_method == RendezvousMethod::write; }
  // The link went without the peer's end of stream: did its process end
  // (exit or kill) with nothing of ours unread, as TCP's FIN would say, or
  // is it a reset? See break_connection_locked.
  enum class PeerEnd : uint8_t { orderly, not_yet_known, reset };
  PeerEnd peer_end_locked();
  ControlState control_state_locked();
  // While a reset is provisional (reset_provisional_until_), looks at the
  // control channel again: the FIN makes it the peer's orderly close, a
  // reset or the end of the grace makes it final. True while still
  // provisional: a caller that would report the reset waits or says EAGAIN.
  bool settle_provisional_reset_locked();
  // A blocking reader's wait for that verdict: sleeps on the control fd with
  // no lock held until it is readable or the grace ends. 0 or -EINTR.
  int wait_for_peer_verdict(StateLock& receive_lock, StateLock& state);
  // What the control handler said of the TCP connection, acted on (the
  // blocking waits and on_control_event alike).
  void act_on_control_verdict_locked(ControlVerdict verdict);
  // The reader took `ring_bytes` more of the ring: credit, and, if the
  // application `read` them (not the backlog), the transport's published count.
  void note_consumed_locked(uint64_t ring_bytes, bool sender_wants_credit, bool read = true);
  // Wakes whoever waits for this stream's state to change.
  void notify_waiters_locked();
  // Wakes them to look again (no change counted: edge-triggered epoll
  // reports what changes when they look).
  void wake_waiters_locked();
  // Arms the transport for a sleep of the thread with `waker` (null: no
  // waker), naming that waker when it is the stream's only sleeper.
  int arm_transport_locked(ThreadWaker* waker);
  // The transport has no wait handle: what would have woken a sleeper on it.
  void transport_signalled() override;
  // A writer found no room in the peer's ring (RoomWantedHandler).
  void note_stall_locked();
  // After a write: with less than half the peer's ring free and no credit
  // since the last time, rings the peer's doorbell now (at most once per
  // kEarlyRoomInterval), so that an application that is not reading has its
  // engine take our bytes before we run out, as TCP's buffers would.
  void ask_for_room_early_locked();

  // --- stream_wait.cc ---
  struct WaitOptions {
    bool interruptible = false;  // a signal ends the wait with -EINTR
    bool until_broken = true;    // a broken stream ends the wait
    std::optional<Clock::time_point> deadline = std::nullopt;  // -ETIMEDOUT past it
    // A wait for the peer's next bytes: it spins as long as spin_budget_
    // says and teaches it. Other waits (credit, a rendezvous's answer, the
    // pieces of a pull) wait on bulk transfers, not on a round trip: they
    // spin spin_time, so a streaming writer does not burn the core the
    // transfer needs.
    bool adaptive_spin = false;
  };
  // Waits until ready() (evaluated under the state lock), or as `options` say.
  int wait_until(StateLock& state, FunctionRef<bool()> ready, const WaitOptions& options);

  // --- stream_send.cc ---
  // A write that goes whole as one inline record, at once, with nothing
  // else pending (nearly every small write): its count, or nullopt when the
  // write is not that case and takes the general path.
  std::optional<ssize_t> send_single_inline_record(const iovec& data);
  bool can_write_locked(uint64_t smallest_record) const;
  // Eager writes about to be posted take their ring bytes, send-queue
  // entries and unsent payload.
  void reserve_eager_writes_locked(uint64_t ring_bytes, uint32_t posts, uint64_t payload);
  // Takes a counted slot and returns the data_arrived immediate that
  // announces `ring_bytes` more ring bytes.
  uint32_t announce_data_locked(uint64_t ring_bytes);
  // -EPIPE or the pending error (taken only if `report`), or 0.
  int send_error_locked(bool report);
  // What a send returns after `error` stopped it: the partial count, or the
  // error (a broken stream's pending error first).
  ssize_t finish_send_locked(ssize_t accepted, ssize_t error);
  // What a send returns once every byte is accepted: the count, after
  // announcing what MSG_MORE held back, unless this send has MSG_MORE too.
  ssize_t all_accepted_locked(ssize_t accepted, bool more);
  // One step of copying, with the send lock held: plans, reserves, stages
  // (the state lock released meanwhile) and posts. Bytes sent, or -errno.
  ssize_t send_eager_step(StateLock& state, IovecCursor& source, uint64_t most_bytes, bool more);
  // Posts the descriptor of a rendezvous, in ring order; its id or -errno.
  int64_t post_rendezvous_descriptor(StateLock& state, ByteRange piece,
                                     const RegistrationLease& lease);
  // Sends `piece` by rendezvous and waits for the peer to pull it: its length;
  // 0 if the peer took nothing within rendezvous_patience and declined it
  // (copy it instead); or -errno (-EINTR when interrupted, -EAGAIN past
  // SO_SNDTIMEO, and the peer declined).
  ssize_t send_rendezvous(StateLock& state, ByteRange piece, const RegistrationLease& lease,
                          std::optional<Clock::time_point> deadline);
  // Asks the peer to decline rendezvous `id`, and rings its doorbell so that
  // it answers even if its application never calls in.
  void cancel_rendezvous_locked(uint32_t id);
  uint64_t bytes_before_rendezvous(const IovecCursor& source, Blocking& blocking) const;
  // Whether `payload` bytes of eager records fit in the free ring now.
  bool fits_free_ring_locked(uint64_t payload) const;

  // --- stream_send_backlog.cc: what the peer's ring has no room for yet ---
  // With the send lock: takes as much of `source` as the send backlog has
  // room for (copied with the state lock released). The count.
  size_t hold_in_send_backlog(StateLock& state, IovecCursor& source);
  // With the send lock: moves the backlog's bytes into the peer's ring as
  // far as its room goes; if some stay, asks the peer for room. Under
  // _exit (perhaps in a signal handler) it frees no memory and calls no
  // handler: the caller rings the peer itself.
  enum class PushCaller : uint8_t { thread, underscore_exit };
  void push_send_backlog_locked(StateLock& state, PushCaller caller = PushCaller::thread);
  // With the send lock: pushes until nothing is held, for as long as the
  // peer gives room at least every close_flush_timeout (the kernel's FIN
  // follows the last byte of TCP's send buffer). The bytes left: 0, or
  // what must not be followed by an orderly end.
  uint64_t push_all_held_locked(StateLock& state);
  // Without the send lock: pushes if the peer gave room and no writer is in
  // (a writer that is in pushes first itself).
  void try_push_send_backlog_locked(StateLock& state,
                                    PushCaller caller = PushCaller::thread);
  // Asks the peer (room_wanted) to return credit at once and ring our
  // doorbell with it, once per credit received.
  void request_room_locked();
  // The reader's side of room_wanted.
  void on_room_wanted_locked(uint32_t held);
  bool send_backlog_writable_locked() const;

  // --- stream_receive.cc ---
  int receive_error_locked();
  bool at_end_of_stream_locked() const;
  bool answer_owed_locked() const;
  // Who takes bytes out of the ring: the application (they are read), or
  // the receive backlog (they stay readable; only their ring room is freed).
  enum class RingTaker : uint8_t { application, backlog };
  // Copies data records at the head into `destination` (the copy runs without
  // the state lock), consuming them; stops at a rendezvous record.
  size_t deliver_ring_data(StateLock& state, IovecCursor& destination,
                           RingTaker taker = RingTaker::application);
  // The backlog's bytes, which come before the ring's, into `destination`.
  size_t deliver_backlog(StateLock& state, IovecCursor& destination);
  // answer_peer's part with both locks held: the head's data into the backlog.
  void take_into_backlog_locked(StateLock& state);
  // Delivers from the rendezvous at the head, pulling as needed (straight
  // into `prepared_landing` when it covers the destination).
  ssize_t deliver_rendezvous(StateLock& receive_lock, StateLock& state, IovecCursor& destination,
                             const RegistrationLease& prepared_landing);
  // Before a read sleeps for bytes that will likely come by rendezvous:
  // registers the buffer they would land in, so that the pull can ask for
  // them the moment the rendezvous arrives.
  void prepare_landing_locked(StateLock& state, const IovecCursor& destination,
                              RegistrationLease& landing);
  // The peer's end of stream came, then the link went: nothing more of its
  // will land (a rendezvous of its unfinished stays so).
  bool peer_ended_in_order_locked() const { return broken_ && eof_received_; }
  // Drops the head rendezvous, and true, if its writer ended (in order) in
  // the middle of it and nothing of it is left to deliver.
  bool drop_unfinished_rendezvous_locked(const RecordView& record, IncomingRendezvous& rendezvous);
  // MSG_PEEK: copies what is readable without consuming it.
  ssize_t peek(StateLock& receive_lock, StateLock& state, std::span<const iovec> buffers);
  void consume_record_locked(const RecordView& record);
  size_t take_from_bounce_locked(IncomingRendezvous& rendezvous, IovecCursor& destination);

  // --- stream_pull.cc: RDMA reads of the front rendezvous ---
  // Each returns with both locks held again; 0 or -errno. pull_direct
  // returns 1 if it could not register the buffer (use the bounce buffer).
  int pull_into_bounce(StateLock& receive_lock, StateLock& state, IncomingRendezvous& rendezvous,
                       uint64_t length);
  int pull_direct(StateLock& receive_lock, StateLock& state, IncomingRendezvous& rendezvous,
                  ByteRange destination, const RegistrationLease& prepared_landing);
  int run_pull(StateLock& receive_lock, StateLock& state, IncomingRendezvous& rendezvous,
               LocalSlice landing);
  // One piece of a pull: a read of the sender's buffer, or a request that
  // the sender write it (RendezvousMethod::write). 0 or -errno.
  int post_pull_piece_locked(const IncomingRendezvous& rendezvous, LocalSlice piece,
                             uint64_t source_offset);
  // What may land in our memory by the peer's hand: the bounce buffer and
  // the application buffers a pull lands in.
  MemoryAccess landing_access() const {
    return writes_rendezvous() ? MemoryAccess::remote_write : MemoryAccess::local_only;
  }
  // What the peer may do with a rendezvous source: read it, or nothing (we
  // write it ourselves).
  MemoryAccess source_access() const {
    return writes_rendezvous() ? MemoryAccess::local_only : MemoryAccess::remote_read;
  }

  std::unique_ptr<Transport> transport_;  // destroyed last: registrations below refer to it
  StreamSettings settings_;
  std::shared_ptr<RegistrationProvider> registrations_;
  MappedMemory ring_;
  std::unique_ptr<MemoryRegistration> ring_registration_;
  RingGeometry ring_geometry_;
  WakeSignal wake_;

  FutexMutex send_mutex_;
  FutexMutex receive_mutex_;
  FutexMutex state_mutex_;

  // --- guarded by state_mutex_ ---
  bool connected_ = false;
  KeptFd control_;
  bool watching_control_ = false;
  ControlEventHandler control_handler_;
  ControlProbe control_probe_;
  std::optional<EagerSender> eager_;
  std::optional<SendCredit> send_credit_;
  std::optional<NotificationWindow> window_;
  ReceiveCredit receive_credit_;
  RendezvousSender rendezvous_out_;
  RendezvousReceiver rendezvous_in_;
  uint32_t posts_outstanding_ = 0;
  // Pieces of the pull in progress not yet landed: reads, or write requests.
  uint32_t pull_pieces_outstanding_ = 0;
  uint64_t unnotified_ring_bytes_ = 0;  // written with MSG_MORE, not yet announced
  uint64_t unnotified_payload_ = 0;
  uint64_t unsent_payload_ = 0;         // posted, not yet completed
  uint64_t notified_ = 0;               // ring bytes the peer announced
  uint64_t scanned_ = 0;                // ring bytes whose records were counted
  uint64_t readable_bytes_ = 0;
  uint64_t receive_low_water_ = 1;
  // The peer shut down both directions: our next write resets the
  // connection instead of being delivered, as TCP's peer answers it with RST.
  bool peer_reader_gone_ = false;
  // We shut down both directions: reader_gone goes after our end_of_stream.
  bool reader_gone_pending_ = false;
  bool eof_received_ = false;
  uint64_t eof_offset_ = 0;
  bool write_shutdown_ = false;
  bool read_shutdown_ = false;
  bool closed_ = false;
  bool broken_ = false;
  int pending_error_ = 0;               // positive errno, reported once
  bool end_of_stream_pending_ = false;
  bool pull_active_ = false;            // a receiver waits for its reads
  bool pull_failed_ = false;            // one of the current pull's reads failed
  // What the last read's direct pull took, if the last bytes read came so
  // (prepare_landing_locked); 0 otherwise.
  uint64_t expected_rendezvous_length_ = 0;
  // The peer ended its stream and then went: TCP's orderly close, not a
  // reset. TCP answers our next write with a reset; later ones fail EPIPE.
  bool peer_closed_ = false;
  bool wrote_after_peer_close_ = false;
  // The peer's end left the link (Transport::peer_left) with nothing of ours
  // unread, before its FIN came: between hosts the rdma_cm's disconnect of
  // a process that ended can overtake the FIN its kernel sends for it.
  // Until this time the reset is provisional and the FIN makes it an
  // orderly close, as TCP gives.
  std::optional<Clock::time_point> reset_provisional_until_;
  uint64_t activity_ = 0;
  std::vector<std::shared_ptr<ReadinessSignal>> readiness_signals_;
  std::deque<Notification> pending_replies_;  // rendezvous answers and cancels
  RendezvousCounts rendezvous_counts_;  // but its bytes_sent and bytes_received:
  std::atomic<uint64_t> rendezvous_bytes_sent_{0};
  std::atomic<uint64_t> rendezvous_bytes_received_{0};
  SpinBudget spin_budget_;
  CoreSharingBackoff core_sharing_;
  // RendezvousMethod::write: pieces of our rendezvous the peer asked for,
  // not yet posted; the slots of our requests in the peer's box.
  struct RendezvousWrite {
    uint32_t id;
    uint32_t slot;
    LocalSlice source;
    RemoteRegion destination;
  };
  std::deque<RendezvousWrite> rendezvous_writes_;
  RemoteRegion peer_request_box_{};
  uint32_t next_request_slot_ = 0;  // where our next request goes
  uint32_t next_written_slot_ = 0;  // the request the peer answers next
  // Our requests' bytes, posted from here (a post may be too big to go inline).
  MappedMemory request_outbox_;
  std::unique_ptr<MemoryRegistration> request_outbox_registration_;

  // A writer stalled for room since then (none: credit came since).
  std::optional<Clock::time_point> stalled_since_;
  bool room_asked_ = false;  // the doorbell rang for the current stall
  bool room_asked_early_ = false;  // ask_for_room_early_locked rang; no credit since
  Clock::time_point early_room_asked_at_{};
  RoomWantedHandler room_wanted_;
  // The send backlog's size (the backlog itself is the send lock's).
  uint64_t send_backlog_bytes_ = 0;
  // room_wanted's value waiting for a slot (the latest state wins).
  std::optional<uint32_t> held_notice_;
  bool peer_told_held_ = false;  // room_wanted(1) sent, room_wanted(0) not since
  bool room_requested_ = false;        // room_wanted sent; no credit since
  // How long ask_peer_for_room waits before it looks at the send backlog again.
  std::chrono::microseconds backlog_retry_{0};
  // The peer asked for room (room_wanted): ring its doorbell with our next credit.
  bool doorbell_on_credit_ = false;
  bool peer_holds_bytes_ = false;  // room_wanted(1) came, room_wanted(0) not since
  bool doorbells_allowed_ = false;  // allow_doorbells()
  bool credit_doorbells_allowed_ = false;  // allow_credit_doorbells()
  bool end_sent_wanted_ = false;    // shutdown_write returned 1
  EndSentHandler end_sent_;
  // Rings the peer's doorbell for room_wanted if it may now.
  void ring_for_room_locked();

  // --- guarded by send_mutex_ ---
  ByteBacklog send_backlog_;

  // --- guarded by receive_mutex_ ---
  ByteBacklog backlog_;
  uint64_t read_offset_ = 0;  // the head record's offset
  uint64_t head_taken_ = 0;   // payload bytes of the head data record already read
};

}  // namespace qpsock::stream
