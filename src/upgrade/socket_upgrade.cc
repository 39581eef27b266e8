#include "upgrade/socket_upgrade.h"

#include <fcntl.h>

#include <cerrno>
#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <new>
#include <optional>
#include <vector>

#include "common/errno_guard.h"
#include "common/kept_fd.h"
#include "common/log.h"
#include "config/config_loader.h"
#include "libc/next_symbols.h"
#include "upgrade/connection_registry.h"
#include "upgrade/connection_reset.h"
#include "upgrade/handshake.h"
#include "upgrade/io_uring_detector.h"
#include "upgrade/lingering_close.h"
#include "upgrade/same_host_upgrade.h"
#include "upgrade/side_channel.h"
#include "upgrade/socket_identity.h"
#include "upgrade/upgrade_agent.h"
#include "upgrade/upgrade_worker.h"
#include "upgrade/verbs_addresses.h"
#include "upgrade/verbs_upgrade.h"

namespace qpsock::upgrade {
namespace {

// upgrade_timeout after `from`.
Deadline upgrade_deadline(std::chrono::steady_clock::time_point from = std::chrono::steady_clock::now()) {
  return from + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    config::process_config().tunables().upgrade_timeout);
}

config::SameHost same_host_path() { return config::process_config().tunables().same_host; }

using Clock = std::chrono::steady_clock;

// How long after its claim the worker first looks for a server's client:
// the shorter delay, since where the client is is not known before (with
// same_host = rdma every client is met over RDMA).
Clock::duration first_look_delay() {
  if (same_host_path() == config::SameHost::rdma) return rdma_upgrade_delay();
  return std::min(shm_upgrade_delay(), rdma_upgrade_delay());
}

// Whether the server looks for its client in the worker once that delay is
// over, rather than at its first I/O in its own thread: a connection closed
// sooner costs the server no system call for its upgrade.
bool locates_client_later() {
  const Clock::duration delay = same_host_path() == config::SameHost::rdma ? rdma_upgrade_delay()
                                                                         : shm_upgrade_delay();
  return delay != Clock::duration::zero();
}

// Where a server's client is: on this host (its socket's inode in
// `client_inode`), elsewhere (or sent over RDMA anyway: same_host = rdma),
// or gone: its socket is on this host but closed, so there is nothing to
// upgrade. One exact SOCK_DIAG query, which fails at once for a peer on
// another host; none once the connection knows it.
enum class ClientPlace { this_host, elsewhere, closed };

ClientPlace locate_client(int fd, Connection& connection, uint64_t& client_inode) {
  if (same_host_path() == config::SameHost::rdma) return ClientPlace::elsewhere;
  client_inode = connection.client_inode();
  if (client_inode != 0) return ClientPlace::this_host;
  const int found = find_peer_socket_inode(fd, client_inode);
  if (found == -EPIPE) return ClientPlace::closed;
  if (found != 0) return ClientPlace::elsewhere;
  connection.note_client_inode(client_inode);
  return ClientPlace::this_host;
}

void decline_client_closed(int fd, Connection& connection) {
  QPSOCK_LOG(info, "fd %d: the client closed its end before the upgrade; stays on TCP", fd);
  connection.decline("the client closed its end before the upgrade");
}

void decline_same_host_off(int fd, Connection& connection) {
  QPSOCK_LOG(info, "fd %d: same-host upgrades are off; stays on TCP", fd);
  connection.decline("same-host upgrades are off (same_host = kernel)");
}

// The server's look for its client, in the upgrade worker shm_upgrade_delay
// after the claim (a connection closed sooner never got here): one on this
// host is met over AF_UNIX now, any other over rdma_cm rdma_upgrade_delay
// after the claim. An early look (shm_upgrade_bytes moved) only tries a
// client on this host whose listener is there; the first claim's job does
// the rest.
void locate_client_in_worker(int fd, uint64_t socket_inode, const std::weak_ptr<Connection>& weak,
                             Clock::time_point claimed_at, Deadline deadline, bool early) {
  std::shared_ptr<Connection> connection = weak.lock();
  if (connection == nullptr || connection->phase() != UpgradePhase::offered) return;
  // The worker runs in the process that claimed the attempt.
  if (declined_for_io_uring(fd, *connection)) return;
  uint64_t client_inode = 0;
  ClientPlace place = ClientPlace::elsewhere;
  sockaddr_storage local{}, peer{};
  KeptFd tcp;
  // Under a use of the socket's current number (the application may have renumbered it).
  const int result = read_socket(*connection, fd, socket_inode, [&](int kept) {
    place = locate_client(kept, *connection, client_inode);
    return place == ClientPlace::elsewhere ? server_meeting_addresses(kept, local, peer) : 0;
  }, tcp);
  if (result < 0) {
    connection->decline(result == -ENOTCONN ? "the socket was closed before its upgrade"
                                            : "the socket's addresses could not be read");
    return;
  }
  if (place == ClientPlace::closed) {
    decline_client_closed(tcp.fd, *connection);
    return;
  }
  const bool on_this_host = place == ClientPlace::this_host;
  if (early && (!on_this_host || same_host_path() == config::SameHost::kernel)) return;
  if (!on_this_host) {
    queue_server_verbs_upgrade(tcp.fd, socket_inode, local, peer, connection, deadline,
                               claimed_at + rdma_upgrade_delay());
    return;
  }
  if (same_host_path() == config::SameHost::kernel) {
    decline_same_host_off(tcp.fd, *connection);
    return;
  }
  if (early)
    attempt_same_host_upgrade_early(*connection, tcp, socket_inode, client_inode, deadline);
  else
    attempt_same_host_upgrade_in_worker(*connection, tcp, socket_inode, client_inode, deadline);
}

// Queues the worker's look for the client, due the delay after the claim (at
// once for an early one).
void queue_locating_the_client(int fd, uint64_t inode, const std::shared_ptr<Connection>& connection,
                               Clock::time_point claimed_at, bool early) {
  const Deadline deadline = upgrade_deadline(claimed_at);
  std::weak_ptr<Connection> weak = connection;
  WorkerJob job;
  job.run = [fd, inode, weak, claimed_at, deadline, early] {
    locate_client_in_worker(fd, inode, weak, claimed_at, deadline, early);
  };
  job.not_before = early ? claimed_at : claimed_at + first_look_delay();
  job.owner = weak;
  job.waits_on_fabric = false;
  if (!run_in_upgrade_worker(std::move(job))) connection->decline("the upgrade worker could not start");
}

// The claim queued with a lock, where the worker cannot take it lock-free
// (it holds too many, or does not run): the socket's identity is read now.
void queue_claim_with_identity(int fd, const std::shared_ptr<Connection>& connection,
                               Clock::time_point claimed_at) {
  uint64_t inode = 0;
  if (socket_inode_of_fd(fd, inode) < 0) {
    connection->decline("the socket's identity could not be read");
    return;
  }
  queue_locating_the_client(fd, inode, connection, claimed_at, false);
}

// The worker's intake of a claim handed over: the number is looked up anew and
// must still hold the connection that claimed. Its socket's identity is read
// here, not in the claiming call: a connection that ends within the delay
// never costs that system call.
void take_server_claim(const ServerClaim& claim) {
  std::shared_ptr<Connection> connection = find_connection(claim.fd);
  if (connection == nullptr || connection->serial() != claim.connection_serial ||
      connection->role() != config::Role::server || connection->phase() != UpgradePhase::offered)
    return;
  uint64_t inode = 0;
  if (connection_socket_inode(claim.fd, *connection, inode) < 0) return;
  queue_locating_the_client(claim.fd, inode, connection, claim.claimed_at, claim.early);
}

// Whether this process has done I/O on a connection it accepted (claimed an
// attempt), rather than leave that to forked children.
std::atomic<bool> serves_own_connections{false};

// The socket layer's statistics handle of an fd, for a Connection made when
// its offer is claimed (offer_server_upgrade sets it).
std::atomic<stats::Handle (*)(int fd)> statistics_source{nullptr};

// The server's side, once this process has claimed the attempt (its first
// I/O, or an epoll set it joined): the client is looked for in the worker.
// The claim may come in a signal handler: while the worker runs (started at
// an accept once this process has claimed an attempt) it is handed over
// without a lock or an allocation; before, it is kept in the Connection.
void begin_server_upgrade(int fd, const std::shared_ptr<Connection>& connection) {
  const Clock::time_point claimed_at = Clock::now();
  if (!upgrade_worker_running()) {
    // No worker thread yet (a forked child, or this process's first
    // connection): started only for a connection that lives past the delay
    // (connection_for_io), which reads the socket's identity then. The
    // process's next accept starts it.
    serves_own_connections.store(true, std::memory_order_relaxed);
    connection->defer_claim(claimed_at);
    return;
  }
  if (hand_claim_to_upgrade_worker({fd, connection->serial(), claimed_at}, claimed_at + first_look_delay()))
    return;
  // The worker holds too many claims: queued, with a lock.
  queue_claim_with_identity(fd, connection, claimed_at);
}

// A claim again, before the delay is over, of a connection that moved
// shm_upgrade_bytes (the worker runs). Dropped if the worker holds too many
// claims: the first claim's job still comes.
void hand_early_claim(int fd, const Connection& connection) {
  const Clock::time_point now = Clock::now();
  (void)hand_claim_to_upgrade_worker({fd, connection.serial(), now, true}, now);
}

// Takes `connection`'s deferred claim (begin_server_upgrade) if it was made
// by `claimed_by`, and queues the worker's look for its client: true if queued.
bool queue_deferred_claim(int fd, const std::shared_ptr<Connection>& connection,
                          Clock::time_point claimed_by) {
  const std::optional<Clock::time_point> claimed_at = connection->take_deferred_claim(claimed_by);
  if (!claimed_at) return false;
  // Without a lock or an allocation while the worker runs.
  if (hand_claim_to_upgrade_worker({fd, connection->serial(), *claimed_at}, *claimed_at + first_look_delay()))
    return true;
  queue_claim_with_identity(fd, connection, *claimed_at);
  return true;
}

// A deferred claim, once due, at the connection's next I/O. Where no worker
// runs yet, this starts it, which allocates: a signal handler whose data call
// comes here while its thread is in malloc would deadlock (docs/upgrade-protocol.md).
void hand_deferred_claim(int fd, const std::shared_ptr<Connection>& connection) {
  // A connection that streams waits for no delay (moved_over_tcp_while_offered).
  const bool streams = connection->offered_tcp_bytes() >= shm_upgrade_bytes();
  const Clock::time_point claimed_by = streams ? Clock::time_point::max() : Clock::now() - first_look_delay();
  if (queue_deferred_claim(fd, connection, claimed_by) && streams)
    hand_early_claim(fd, *connection);
}

// The claims this process's connections deferred while it had no worker,
// once it has one: each due as its own claim said.
void hand_claims_deferred_until_the_worker() {
  std::vector<int> deferred;
  visit_connections([&deferred](int fd, Connection& connection) {
    if (connection.has_deferred_claim()) deferred.push_back(fd);
  });
  for (const int fd : deferred) {
    if (const std::shared_ptr<Connection> connection = find_connection(fd))
      queue_deferred_claim(fd, connection, Clock::time_point::max());
  }
}

// The server's side, at its first I/O in this process.
void try_server_upgrade(int fd, const std::shared_ptr<Connection>& connection) {
  // io_uring is looked for when the attempt begins (locate_client_in_worker).
  if (locates_client_later()) {
    begin_server_upgrade(fd, connection);
    return;
  }
  // Checked here, in the process that does the I/O (a forked child may differ).
  if (declined_for_io_uring(fd, *connection)) return;
  uint64_t client_inode = 0;
  const ClientPlace place = locate_client(fd, *connection, client_inode);
  if (place == ClientPlace::closed) {
    decline_client_closed(fd, *connection);
    return;
  }
  if (place == ClientPlace::this_host) {
    if (same_host_path() == config::SameHost::kernel)
      decline_same_host_off(fd, *connection);
    else
      attempt_same_host_upgrade_now(fd, *connection, client_inode, upgrade_deadline());
    return;
  }
  // Begins in the worker, rdma_upgrade_delay from now.
  begin_server_verbs_upgrade(fd, connection, upgrade_deadline());
}

}  // namespace

void offer_client_upgrade(int fd, const sockaddr* destination, socklen_t length) {
  ErrnoGuard errno_guard;
  // A connection that cannot be offered still gets a (declined) Connection:
  // it carries the reason to qpsock-stat, and the first data call drops it.
  auto connection = std::make_shared<Connection>(config::Role::client);
  attach_connection(fd, connection);
  const config::SameHost same_host = same_host_path();
  const bool on_this_host = is_local_address(destination, length);
  if (on_this_host && same_host == config::SameHost::kernel) {
    QPSOCK_LOG(info, "fd %d: same-host upgrades are off; stays on TCP", fd);
    connection->decline("same-host upgrades are off (same_host = kernel)");
    return;
  }
  // Planned: the agent opens the listener half the delay from now, and
  // looks for io_uring and reads the socket's inode (which names the
  // listener) then; a connection that ends sooner costs neither.
  const bool over_shm = on_this_host && same_host == config::SameHost::shm;
  const Clock::duration delay = over_shm ? shm_upgrade_delay() : rdma_upgrade_delay();
  ClientListeners listeners;
  if (delay >= kShortestPlannedListenerDelay) {
    (over_shm ? listeners.planned_same_host : listeners.planned_rdma) = Clock::now() + delay / 2;
    offer_upgrade(std::move(listeners), fd, 0, connection, upgrade_deadline());
    return;
  }
  // Now: the listener must be there before the SYN goes out, since the server may come at once.
  if (declined_for_io_uring(fd, *connection)) return;
  uint64_t inode = 0;
  const char* reason = nullptr;
  int error = socket_inode_of_fd(fd, inode);
  if (error < 0) {
    reason = "the socket's identity could not be read";
  } else if (over_shm) {
    error = open_same_host_listener(inode, listeners, reason);
  } else {
    RdmaListenerPlan plan;
    error = prepare_verbs_offer(fd, destination, length, plan, reason);
    if (error == 0) error = open_verbs_listener(fd, plan, listeners.rdma, reason);
  }
  if (error < 0) {
    QPSOCK_LOG(info, "fd %d: %s (%d); stays on TCP", fd, reason, error);
    connection->decline(reason);
    return;
  }
  offer_upgrade(std::move(listeners), fd, inode, connection, upgrade_deadline());
}

void withdraw_upgrade(int fd) {
  ErrnoGuard errno_guard;
  if (auto connection = detach_connection(fd)) connection->decline("connect failed");
}

void offer_server_upgrade(int fd, stats::Handle (*statistics_of)(int fd)) {
  ErrnoGuard errno_guard;
  if (statistics_source.load(std::memory_order_relaxed) != statistics_of)
    statistics_source.store(statistics_of, std::memory_order_relaxed);
  // The client is looked for from the first I/O on, in the process that
  // does it (and io_uring, when the attempt begins): a forked child's I/O
  // keeps the socket's number too. Its Connection is made then.
  offer_unclaimed(fd);
  prepare_kept_fds();
  if (!locates_client_later()) return;
  set_server_claim_intake(take_server_claim);
  // Started here, where allocating is safe, so that the first I/O's claim
  // (begin_server_upgrade) never needs to; but only in a process that does
  // its connections' I/O itself. A server that forks a child per connection
  // (PostgreSQL, sshd) never does: it stays single-threaded, and each fork
  // stays as cheap as without qpsock (glibc's fork locks and copies more,
  // and the child faults in more pages, once a process has a second thread).
  if (serves_own_connections.load(std::memory_order_relaxed) && !upgrade_worker_running() &&
      start_upgrade_worker())
    hand_claims_deferred_until_the_worker();
}

ConnectionHold claim_offered_connection(int fd) {
  return claim_offer(fd, [fd](Connection& connection) {
    if (stats::Handle (*source)(int) = statistics_source.load(std::memory_order_relaxed))
      connection.attach_statistics(source(fd));
  });
}

void begin_server_upgrade_when_watched(int fd) {
  if (!any_connections_or_offers()) return;
  std::shared_ptr<Connection> connection = claim_offered_connection(fd).shared();
  if (connection == nullptr || connection->role() != config::Role::server ||
      connection->phase() != UpgradePhase::offered)
    return;
  ErrnoGuard errno_guard;
  uint64_t client_inode = 0;
  // Without the delay, a client on this host is met at the first I/O, in the
  // application's thread, and io_uring declined there with its line; with
  // it, both when the attempt begins.
  if (!locates_client_later() &&
      (locate_client(fd, *connection, client_inode) != ClientPlace::elsewhere ||
       process_uses_io_uring()))
    return;
  if (!connection->claim_server_attempt()) return;
  if (locates_client_later())
    begin_server_upgrade(fd, connection);
  else
    begin_server_verbs_upgrade(fd, connection, upgrade_deadline());
}

void moved_over_tcp_while_offered(int fd, Connection& connection, uint64_t before, uint64_t after) {
  // Called at every TCP transfer while offered: the count's crossings first.
  const uint64_t enough = shm_upgrade_bytes();
  const bool client = connection.role() == config::Role::client;
  if (client ? !(before < enough / 2 && after >= enough / 2)
             : after < enough || std::bit_width(before / enough) == std::bit_width(after / enough))
    return;
  if (!locates_client_later()) return;
  ErrnoGuard errno_guard;
  if (client) {
    // The agent opens a planned listener once it sees the count (upgrade_agent.h).
    wake_upgrade_agent();
    return;
  }
  // A deferred claim (no worker yet) is handed over at the next data call
  // (hand_deferred_claim), not here under the call's locks.
  if (!upgrade_worker_running()) return;
  hand_early_claim(fd, connection);
}

ConnectionHold connection_for_io(int fd) {
  // Null at once while the process has no connection at all.
  ConnectionHold connection = hold_connection(fd);
  if (!connection) {
    // An accepted connection's first I/O in this process makes its Connection.
    if (!any_offers()) return connection;
    connection = claim_offered_connection(fd);
    if (!connection) return connection;
  }
  if (connection->role() == config::Role::server && connection->phase() == UpgradePhase::offered) {
    ErrnoGuard errno_guard;
    if (connection->claim_server_attempt())
      try_server_upgrade(fd, connection.shared());
    else if (connection->has_deferred_claim())
      hand_deferred_claim(fd, connection.shared());
  }
  if (connection->phase() == UpgradePhase::declined && connection->stream() == nullptr) {
    // Nothing will ever switch: later calls go straight to the kernel.
    ErrnoGuard errno_guard;
    detach_connection(fd);
    return {};
  }
  return connection;
}

namespace {

// Which connections' fds a new program may hold: an exec'd one only those
// not marked close-on-exec; a spawned one also those (posix_spawn's file
// actions may dup2 one onto its stdin or stdout, clearing the mark on the copy).
enum class Inheriting : uint8_t { without_close_on_exec, every_fd };

// Calls `visit` for each connection with a stream (its own or another
// process's) whose fd a new program may inherit.
template <typename Visit>
void visit_inheritable_streams(Inheriting inheriting, Visit visit) {
  visit_connections([&visit, inheriting](int fd, Connection& connection) {
    if (connection.stream() == nullptr && !connection.inherited_stream()) return;
    if (inheriting == Inheriting::without_close_on_exec) {
      const int descriptor_flags = next::fcntl(fd, F_GETFD, 0);
      if (descriptor_flags < 0 || (descriptor_flags & FD_CLOEXEC) != 0) return;
    }
    visit(fd, connection);
  });
}

void name_socket(int fd, InheritedStreamsMarker& inherited) {
  uint64_t inode = 0;
  if (socket_inode_of_fd(fd, inode) == 0) inherited.add(inode);
}

}  // namespace

void connections_before_spawn(InheritedStreamsMarker& inherited) {
  ErrnoGuard errno_guard;
  if (!any_connections()) return;
  visit_inheritable_streams(Inheriting::every_fd,
                            [&inherited](int fd, Connection&) { name_socket(fd, inherited); });
}

void connections_before_exec(InheritedStreamsMarker& inherited) {
  ErrnoGuard errno_guard;
  if (!any_connections()) return;
  visit_inheritable_streams(Inheriting::without_close_on_exec,
                            [&inherited](int fd, Connection& connection) {
    if (connection.inherited_stream()) {
      // Another process's stream: the new program is told, and refuses it too.
      name_socket(fd, inherited);
      return;
    }
    QPSOCK_LOG(error, "fd %d: an upgraded connection cannot be inherited across exec yet; "
               "resetting it", fd);
    // The new image sees the socket unconnected rather than a stream it cannot read.
    reset_upgraded_connection(fd, connection);
  });
}

void connections_after_fork_in_child() {
  if (!any_connections() && !any_lingering()) return;
  ErrnoGuard errno_guard;
  // Only if listed: a forking server's every child would otherwise make the
  // list and take its lock, copying their pages.
  if (any_lingering()) lingering_after_fork_in_child();
  if (!any_connections()) return;
  visit_connections([](int, Connection& connection) { connection.abandon_inherited_stream(); });
}

void connections_before_exit(stream::Stream::ExitCall call) {
  // What a peer that is alive takes in microseconds (milliseconds over
  // Soft-RoCE); a dead one's queue pair fails sooner or later.
  constexpr std::chrono::seconds kExitDeliveryTime{2};
  if (!any_connections() && !any_lingering()) return;
  ErrnoGuard errno_guard;
  const auto deadline = std::chrono::steady_clock::now() + kExitDeliveryTime;
  lingering_before_exit(deadline, call);
  if (!any_connections()) return;
  if (call == stream::Stream::ExitCall::exit) {
    // A connection under two fds is visited twice; the second finds nothing to do.
    visit_connections([deadline, call](int fd, Connection& connection) {
      stream::Stream* stream = connection.stream();
      if (stream == nullptr) return;
      if (stream->deliver_before_exit(deadline, call)) {
        // The exit closes the socket: a doorbell left unread in it would
        // make that close a reset, which throws away TCP's send queue.
        connection.take_own_bytes_before_close(fd);
        return;
      }
      QPSOCK_LOG(warn, "fd %d: the process ends with written bytes its peer gave no room for: "
                 "resetting the connection, so the peer sees a reset, not an end after a part", fd);
      reset_when_closed(fd);
    });
    return;
  }
  // _exit, perhaps in a signal handler: each hold is kept, never let go, so
  // that no Connection another thread closed meanwhile is destroyed here.
  for (int fd = 0; fd <= highest_connection_fd(); ++fd) {
    ConnectionHold hold = hold_connection(fd);
    if (!hold) continue;
    if (stream::Stream* stream = hold->stream(); stream && !stream->deliver_before_exit(deadline, call))
      reset_when_closed(fd);
    else
      hold->take_doorbells_before_exit(fd);
    alignas(ConnectionHold) unsigned char kept[sizeof(ConnectionHold)];
    ::new (kept) ConnectionHold(std::move(hold));  // never destroyed: the process is ending
  }
}

void attach_statistics(int fd, stats::Handle handle) {
  if (handle == 0 || !any_connections()) return;
  if (std::shared_ptr<Connection> connection = find_connection(fd))
    connection->attach_statistics(handle);
}

void connection_copied(int source, int destination) {
  // Both numbers must share one Connection: an offer gets it now.
  if (any_offers()) static_cast<void>(claim_offered_connection(source));
  std::shared_ptr<Connection> displaced = copy_connection(source, destination);
  if (displaced != nullptr && connection_in_use(displaced.get()))
    displaced->control_fd_left(destination);
}

void connection_closing(int fd) {
  if (!any_connections_or_offers()) return;
  ErrnoGuard errno_guard;
  std::shared_ptr<Connection> connection = detach_connection(fd);
  if (connection == nullptr) return;
  if (connection_in_use(connection.get())) {
    connection->control_fd_left(fd);
    return;
  }
  // Held bytes go on after the close, as from TCP's send buffer.
  if (linger_after_close(connection, fd)) return;
  connection->take_own_bytes_before_close(fd);
  // Unread data: TCP answers close with a reset, and so do we.
  if (connection->close_stream())
    reset_when_closed(fd);
  else
    drain_after_close(connection, fd);
}

}  // namespace qpsock::upgrade
