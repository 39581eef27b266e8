#include "upgrade/link_upgrade.h"

#include <cerrno>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "common/fork_aware_instance.h"
#include "common/log.h"
#include "common/random_word.h"
#include "transport/shm/shm_transport.h"
#include "upgrade/connection_timers.h"
#include "upgrade/handshake.h"
#include "upgrade/stream_settings_for_socket.h"

namespace qpsock::upgrade {
namespace {

using transport::shm::ChannelFacts;
using transport::shm::ShmTransport;

// A channel of ours on `link`, its stream made (not connected): 0 or -errno.
int open_channel(const std::shared_ptr<transport::shm::PeerProcess>& link, int tcp_fd,
                 std::chrono::milliseconds setup_timeout, ShmTransport*& transport,
                 std::unique_ptr<stream::Stream>& stream) {
  const stream::StreamSettings settings = stream_settings_for_socket(tcp_fd);
  keep_links_as_configured();
  transport::shm::ShmOptions options;
  options.ring_size = settings.ring_size;
  options.setup_timeout = std::max(setup_timeout, std::chrono::milliseconds{1});
  std::unique_ptr<ShmTransport> made;
  if (int error = ShmTransport::open_on_link(link, options, made); error < 0) return error;
  transport = made.get();
  return stream::Stream::create(std::move(made), settings, nullptr, stream);
}

// Our half for the peer: where our arena lies and our stream's ring.
ChannelFacts our_half(const ShmTransport& transport, const stream::Stream& stream) {
  ChannelFacts facts = transport.half();
  const stream::StreamEndpoint endpoint = stream.local_endpoint();
  facts.ring_address = endpoint.ring_address;
  facts.ring_key = endpoint.ring_key;
  facts.ring_size = endpoint.ring_size;
  facts.notification_capacity = endpoint.notification_capacity;
  return facts;
}

stream::StreamEndpoint endpoint_of(const ChannelFacts& facts) {
  return {facts.ring_address, facts.ring_key, facts.ring_size, facts.notification_capacity};
}

std::chrono::milliseconds time_left(Deadline deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
}

// A server's channel asked for and not answered yet.
struct PendingChannel {
  std::weak_ptr<Connection> connection;
  uint64_t serial;
  KeptFd tcp;
  std::shared_ptr<transport::shm::PeerProcess> link;
  ShmTransport* transport;
  std::unique_ptr<stream::Stream> stream;
};

class PendingChannels : public HelperLock {
 public:
  // The request's number.
  uint64_t add(PendingChannel pending) {
    std::lock_guard lock(mutex_);
    if (next_request_ == 0) next_request_ = random_word() | 1;
    const uint64_t request = next_request_++;
    by_serial_[pending.serial] = request;
    by_request_.emplace(request, std::move(pending));
    return request;
  }
  std::optional<PendingChannel> take(uint64_t request) {
    std::lock_guard lock(mutex_);
    return take_locked(request);
  }
  std::optional<PendingChannel> take_for(uint64_t serial) {
    std::lock_guard lock(mutex_);
    const auto found = by_serial_.find(serial);
    if (found == by_serial_.end()) return std::nullopt;
    return take_locked(found->second);
  }
  // The streams are the parent's: let go of without touching them.
  void forget_after_fork() {
    for (auto& [request, pending] : by_request_) (void)pending.stream.release();
    by_request_.clear();
    by_serial_.clear();
  }

 private:
  std::optional<PendingChannel> take_locked(uint64_t request) {
    const auto found = by_request_.find(request);
    if (found == by_request_.end()) return std::nullopt;
    PendingChannel pending = std::move(found->second);
    by_request_.erase(found);
    by_serial_.erase(pending.serial);
    return pending;
  }

  std::unordered_map<uint64_t, PendingChannel> by_request_;
  std::unordered_map<uint64_t, uint64_t> by_serial_;  // Connection::serial() -> request
  uint64_t next_request_ = 0;
};

PendingChannels& pending_channels() { return fork_aware_instance<PendingChannels>(); }

void decline_over_link(Connection& connection, int fd, pid_t pid, int error) {
  QPSOCK_LOG(info, "fd %d: upgrade over the link with pid %d declined (%d); stays on TCP", fd, pid, error);
  // A stream installed already gives itself up when its peer's Hello never comes.
  connection.decline("the upgrade over the link failed");
}

// On the loop's thread: the client answered one of our requests.
void on_channel_answer(std::shared_ptr<transport::shm::PeerProcess> link,
                       const transport::shm::ChannelAnswer& answer) {
  std::optional<PendingChannel> pending = pending_channels().take(answer.request);
  if (!pending) return;  // overdue: declined already
  const std::shared_ptr<Connection> connection = pending->connection.lock();
  if (connection == nullptr) return;  // closed meanwhile: the stream goes, the client's breaks
  int error = answer.socket_inode != 0 ? answer.status : -EPROTO;
  if (error == 0 && link.get() != pending->link.get()) error = -EPROTO;
  if (error == 0) error = pending->transport->attach_half(answer.facts);
  if (error == 0) error = pending->stream->connect(endpoint_of(answer.facts));
  if (error == 0)
    error = connection->install_announced(std::move(pending->stream), pending->tcp, stats::Path::shm);
  if (error < 0) {
    decline_over_link(*connection, pending->tcp.fd, link->pid(), error);
    return;
  }
  QPSOCK_LOG(info, "fd %d: upgraded to shared memory (over the link with pid %d)", pending->tcp.fd,
             link->pid());
}

}  // namespace

bool offered_on_a_link(uint64_t client_inode) {
  return transport::shm::link_offering(client_inode) != nullptr;
}

bool attempt_over_link(Connection& connection, KeptFd tcp, uint64_t client_inode, Deadline deadline) {
  const std::shared_ptr<transport::shm::PeerProcess> link = transport::shm::link_offering(client_inode);
  if (link == nullptr) return false;
  transport::shm::set_channel_answer_handler(&on_channel_answer);
  ShmTransport* transport = nullptr;
  std::unique_ptr<stream::Stream> stream;
  if (int error = open_channel(link, tcp.fd, time_left(deadline), transport, stream); error < 0) {
    decline_over_link(connection, tcp.fd, link->pid(), error);
    return true;
  }
  const ChannelFacts ours = our_half(*transport, *stream);
  const uint64_t request = pending_channels().add(
      {connection.weak_from_this(), connection.serial(), tcp, link, transport, std::move(stream)});
  if (int error = transport::shm::request_channel(*link, request, client_inode, ours); error < 0) {
    if (pending_channels().take(request)) decline_over_link(connection, tcp.fd, link->pid(), error);
    return true;
  }
  run_later(ConnectionTimer::link_answer, connection.weak_from_this(),
            std::max(deadline - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration::zero()));
  return true;
}

void link_answer_overdue(Connection& connection) {
  std::optional<PendingChannel> pending = pending_channels().take_for(connection.serial());
  if (!pending) return;
  decline_over_link(connection, pending->tcp.fd, pending->link->pid(), -ETIMEDOUT);
}

int accept_link_channel(Connection& connection, KeptFd tcp,
                        const std::shared_ptr<transport::shm::PeerProcess>& link,
                        const transport::shm::ChannelRequest& request) {
  ShmTransport* transport = nullptr;
  std::unique_ptr<stream::Stream> stream;
  int error = open_channel(link, tcp.fd, std::chrono::milliseconds{1000}, transport, stream);
  if (error == 0) error = transport->attach_half(request.facts);
  if (error == 0) error = stream->connect(endpoint_of(request.facts));
  if (error < 0) {
    refuse_link_channel(link, request, error);
    return error;
  }
  const ChannelFacts ours = our_half(*transport, *stream);
  // Installed, and our Hello sent, before the answer: once the server has
  // it, its Hello and switch may come at once.
  if (error = connection.install_announced(std::move(stream), tcp, stats::Path::shm); error < 0) {
    refuse_link_channel(link, request, error);
    return error;
  }
  // Unanswered, the server gives up its side: our stream then breaks before
  // any switch, and the connection stays on TCP (install_announced).
  if (error = transport::shm::answer_channel(*link, request, 0, ours); error < 0)
    QPSOCK_LOG(debug, "fd %d: the answer to pid %d could not be sent (%d)", tcp.fd, link->pid(), error);
  return 0;
}

void refuse_link_channel(const std::shared_ptr<transport::shm::PeerProcess>& link,
                         const transport::shm::ChannelRequest& request, int error) {
  (void)transport::shm::answer_channel(*link, request, error < 0 ? error : -ECONNREFUSED, {});
}

}  // namespace qpsock::upgrade
