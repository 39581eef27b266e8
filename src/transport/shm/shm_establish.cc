// ShmTransport::establish: the exchange on the side channel and the checks
// that decide whether shm can carry this connection.
#include <string.h>
#include <unistd.h>

#include <cerrno>

#include "common/errno_guard.h"
#include "common/log.h"
#include "common/own_descriptor.h"
#include "transport/shm/shm_transport.h"
#include "transport/shm/side_channel.h"

namespace qpsock::transport::shm {
namespace {

constexpr uint64_t kHelloMagic = 0x3169686d'68737071;  // "qpshmhi1"
constexpr uint32_t kProtocolVersion = 3;
// The fds a good hello carries: pool, doorbell, wake page.
constexpr size_t kHelloFds = 3;
constexpr uint32_t kLargestSlices = 64;

// The first message each side sends; its link's pool memfd, doorbell
// eventfd and wake page memfd ride with it when status is 0.
struct Hello {
  uint64_t magic;
  uint32_t version;
  uint32_t role;   // ShmRole
  int32_t pid;     // as the sender sees itself (for logs)
  int32_t status;  // 0, or the -errno its local setup failed with
  uint64_t arena_offset;   // the channel's arena, in the sender's pool
  uint64_t arena_size;
  uint64_t probe_address;  // where the sender's probe word is, in its address space
  uint64_t link_id;        // its OwnDoorbell's: the same for every hello of the link
  uint32_t wake_slot;      // the channel's slot on its doorbell
  uint32_t reserved;
};
static_assert(sizeof(Hello) == 64, "the size establish() documents");

// The second: whether the sender could read the other's memory.
using Verdict = int32_t;

bool options_valid(const ShmOptions& options) {
  return options.ring_size > 0 && options.ring_size <= kLargestRingCapacity &&
         options.notification_capacity > 0 &&
         options.notification_capacity <= kLargestNotificationCapacity &&
         options.send_queue_depth >= 4 && options.max_outstanding_reads >= 1 &&
         options.max_slices >= stream::kMinimumSlicesPerPost &&
         options.max_slices <= kLargestSlices && options.setup_timeout.count() > 0;
}

// The one line of a failed setup: a warning, except for a descriptor limit
// (ours or the peer's), which a process under many connections meets at
// every attempt while it lasts: one warning per process, then info lines.
void explain_failure(pid_t peer, const char* step, int error) {
  if (is_descriptor_limit(error)) {
    if (take_descriptor_limit_warning())
      QPSOCK_LOG(warn, "shm transport: a descriptor limit (RLIMIT_NOFILE, here or in pid %d) "
                 "keeps connections on TCP while it lasts", peer);
    QPSOCK_LOG(info, "shm transport unavailable with pid %d: %s: %s", peer, step,
               strerrordesc_np(-error));
  } else if (error == -EPERM)
    QPSOCK_LOG(warn,
               "shm transport unavailable with pid %d: %s: the kernel forbids reading the "
               "peer's memory (process_vm_readv: EPERM; Yama ptrace_scope=%d, a second peer "
               "process under scope 1, another user or a non-dumpable process)",
               peer, step, yama_ptrace_scope());
  else
    QPSOCK_LOG(warn, "shm transport unavailable with pid %d: %s: %s", peer, step,
               strerrordesc_np(-error));
}

// Sends ours, then receives theirs (as long, with up to fds_in.size() fds);
// 0 or -errno, explained. -EMFILE, not explained: theirs came whole, but
// not every fd with it (the caller's verdict says so).
int trade(int socket, const void* ours, void* theirs, size_t length, std::span<const int> fds_out,
          std::span<UniqueFd> fds_in, size_t& fds_received, Deadline deadline, pid_t peer,
          const char* what) {
  int error = send_message(socket, ours, length, fds_out, deadline);
  if (error == 0) error = receive_message(socket, theirs, length, fds_in, fds_received, deadline);
  if (error < 0 && error != -EMFILE) explain_failure(peer, what, error);
  return error;
}

// A status or verdict the peer sent: its -errno if it is one, else -EPROTO.
int peers_error(int32_t status) { return status < 0 && status > -4096 ? status : -EPROTO; }

}  // namespace

int ShmTransport::establish(int side_channel_fd, ShmRole role, pid_t peer_pid,
                            const ShmOptions& options, std::unique_ptr<ShmTransport>& out) {
  ErrnoGuard errno_guard;
  auto transport = std::make_unique<ShmTransport>(ConstructionKey{}, options);
  if (side_channel_fd < 0 || peer_pid <= 0 || !options_valid(options) ||
      (role != ShmRole::initiator && role != ShmRole::responder)) {
    explain_failure(peer_pid, "bad arguments", -EINVAL);
    return -EINVAL;
  }
  const Deadline deadline = std::chrono::steady_clock::now() + options.setup_timeout;

  const int local_status = transport->set_up_local(peer_pid);
  Hello ours{};
  ours.magic = kHelloMagic;
  ours.version = kProtocolVersion;
  ours.role = static_cast<uint32_t>(role);
  ours.pid = ::getpid();
  ours.status = local_status;
  int ours_fds[kHelloFds] = {-1, -1, -1};
  if (local_status == 0) {
    const OwnDoorbell& doorbell = transport->peer_->own_doorbell();
    const ChannelFacts half = transport->half();
    ours.arena_offset = half.arena_offset;
    ours.arena_size = half.arena_size;
    ours.probe_address = half.probe_address;
    ours.link_id = doorbell.link_id();
    ours.wake_slot = half.wake_slot;
    ours_fds[0] = transport->peer_->own_pool()->fd();
    ours_fds[1] = doorbell.doorbell_fd();
    ours_fds[2] = doorbell.page_fd();
  }
  Hello theirs{};
  PeerHello peer{};
  size_t fds_received = 0;
  const int hellos = trade(side_channel_fd, &ours, &theirs, sizeof(ours),
                           {ours_fds, local_status == 0 ? kHelloFds : 0u}, peer.fds, fds_received,
                           deadline, peer_pid, "the hellos");
  const bool fds_short = hellos == -EMFILE;
  if (hellos < 0 && !fds_short) return hellos;
  if (local_status < 0) {
    if (is_descriptor_limit(local_status)) note_descriptor_limit();
    explain_failure(peer_pid, "setting up our side", local_status);
    return local_status;
  }
  if (theirs.magic != kHelloMagic || theirs.version != kProtocolVersion) {
    explain_failure(peer_pid, "the peer's hello", -EPROTO);
    return -EPROTO;
  }
  if (theirs.status != 0) {
    const int theirs_error = peers_error(theirs.status);
    explain_failure(peer_pid, "the peer could not set up its side",
                    is_descriptor_limit(theirs_error) ? theirs_error : -ECONNREFUSED);
    return -ECONNREFUSED;
  }

  // Both sides are set up: each now says whether it can use the other's.
  Verdict verdict = 0;
  if (theirs.role == ours.role)
    verdict = -EPROTO;
  else if (fds_short)
    verdict = -EMFILE;
  else if (fds_received != kHelloFds)
    verdict = -EPROTO;
  else {
    peer.arena_offset = theirs.arena_offset;
    peer.arena_size = theirs.arena_size;
    peer.probe_address = theirs.probe_address;
    peer.link_id = theirs.link_id;
    peer.wake_slot = theirs.wake_slot;
    verdict = transport->attach_peer(peer);
  }
  Verdict their_verdict = 0;
  size_t no_fds = 0;
  if (int error = trade(side_channel_fd, &verdict, &their_verdict, sizeof(verdict), {}, {}, no_fds,
                        deadline, peer_pid, "the verdicts");
      error < 0)
    return error;
  if (verdict < 0) {
    if (is_descriptor_limit(verdict)) note_descriptor_limit();
    explain_failure(peer_pid, "attaching to the peer", verdict);
    return verdict;
  }
  if (their_verdict < 0) {
    const int theirs_error = peers_error(their_verdict);
    explain_failure(peer_pid, "the peer cannot use our memory",
                    is_descriptor_limit(theirs_error) ? theirs_error : -ECONNREFUSED);
    return -ECONNREFUSED;
  }
  out = std::move(transport);
  return 0;
}

int ShmTransport::open_on_link(std::shared_ptr<PeerProcess> link, const ShmOptions& options,
                               std::unique_ptr<ShmTransport>& out) {
  ErrnoGuard errno_guard;
  if (link == nullptr || !options_valid(options)) return -EINVAL;
  auto transport = std::make_unique<ShmTransport>(ConstructionKey{}, options);
  transport->peer_ = std::move(link);
  if (int error = transport->set_up_with_peer(); error < 0) {
    explain_failure(transport->peer_->pid(), "setting up our side", error);
    return error;
  }
  out = std::move(transport);
  return 0;
}

ChannelFacts ShmTransport::half() const {
  ChannelFacts facts{};
  facts.arena_offset = local_->pool_offset();
  facts.arena_size = local_->layout().size;
  facts.probe_address = reinterpret_cast<uintptr_t>(&local_->control().probe_word);
  facts.wake_slot = static_cast<uint32_t>(own_slot_);
  return facts;
}

int ShmTransport::attach_half(const ChannelFacts& facts) {
  ErrnoGuard errno_guard;
  if (facts.wake_slot >= kLinkChannels) return -EPROTO;
  const PeerProcess::PeerLink link = peer_->peer_link();
  if (link.pool == nullptr || link.doorbell == nullptr) return -ENOTCONN;
  int error = attach_arena(link.pool, facts.arena_offset, facts.arena_size, facts.probe_address);
  if (error == 0) {
    peer_doorbell_ = link.doorbell;
    peer_slot_ = facts.wake_slot;
  } else {
    explain_failure(peer_->pid(), "attaching to the peer's channel", error);
  }
  return error;
}

int ShmTransport::set_up_local(pid_t peer_pid) {
  if (int error = share_peer_process(peer_pid, peer_); error < 0) return error;
  return set_up_with_peer();
}

int ShmTransport::set_up_with_peer() {
  page_ = process_page();
  epoch_ = current_epoch();
  if (page_ == nullptr || epoch_ == 0) return -ENOMEM;
  if (int error = grant_.acquire(peer_->pid(), page_, epoch_); error < 0) return error;
  own_slot_ = peer_->own_doorbell().add_channel();
  if (own_slot_ < 0) return static_cast<int>(own_slot_);
  std::unique_ptr<LocalArena> arena;
  if (int error = LocalArena::create(peer_->own_pool(),
                                     ArenaLayout::make(options_.notification_capacity, options_.ring_size),
                                     page_, epoch_, arena);
      error < 0)
    return error;
  local_ = std::move(arena);
  publisher_ = std::make_shared<RegistrationPublisher>(local_, page_, epoch_);
  inbox_ = ImmediateReceiver(&local_->inbox(), local_->inbox_slots(), local_->layout(),
                             &local_->control().inbox_head);
  if (int error = peer_->subscribe(this); error < 0) return error;
  listening_for_exit_ = true;
  return 0;
}

int ShmTransport::attach_arena(std::shared_ptr<PeerPool> pool, uint64_t offset, uint64_t size,
                               uint64_t probe_address) {
  if (int error = PeerArena::map(std::move(pool), offset, size, page_, epoch_, peer_arena_); error < 0)
    return error;
  outbox_ = ImmediateSender(&peer_arena_->inbox(), peer_arena_->inbox_slots(),
                            peer_arena_->layout(), &peer_arena_->control().inbox_head);
  // The probe: the word we see in its pool must be at the address it gave,
  // in the process the pid (checked by the pidfd) names.
  uint64_t word = 0;
  const iovec into{&word, sizeof(word)};
  if (int error = peer_->read({&into, 1}, probe_address, sizeof(word)); error < 0) return error;
  if (word != peer_arena_->control().probe_word) return -EPROTO;
  peer_probe_address_ = probe_address;
  return 0;
}

int ShmTransport::attach_peer(PeerHello& hello) {
  for (const UniqueFd& fd : hello.fds)
    if (!fd.valid()) return -EPROTO;
  if (hello.wake_slot >= kLinkChannels) return -EPROTO;
  // The link known is used if the hello names it; a new one only once the
  // probe has proved this hello the peer's.
  std::shared_ptr<PeerPool> pool = peer_->known_peer_pool(hello.link_id);
  const bool new_link = pool == nullptr;
  if (new_link) {
    pool = std::make_shared<PeerPool>();
    if (int error = pool->attach(std::move(hello.fds[0])); error < 0) return error;
  }
  if (int error = attach_arena(pool, hello.arena_offset, hello.arena_size, hello.probe_address);
      error < 0)
    return error;
  PeerProcess::PeerLink link;
  if (int error = peer_->adopt_peer_link(hello.link_id, std::move(hello.fds[1]), hello.fds[2].get(),
                                         new_link ? std::move(pool) : nullptr, link);
      error < 0)
    return error;
  peer_doorbell_ = link.doorbell;
  peer_slot_ = hello.wake_slot;
  return 0;
}

}  // namespace qpsock::transport::shm
