#include "upgrade/upgrade_agent.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "common/own_descriptor.h"
#include "libc/next_symbols.h"
#include "common/helper_thread.h"
#include "upgrade/attempt_threads.h"
#include "upgrade/forked_children.h"
#include "transport/shm/link_channels.h"
#include "upgrade/handshake.h"
#include "upgrade/io_uring_detector.h"
#include "upgrade/link_upgrade.h"
#include "upgrade/same_host_upgrade.h"
#include "upgrade/socket_identity.h"
#include "upgrade/verbs_upgrade.h"

namespace qpsock::upgrade {
namespace {

struct Offer {
  uint64_t id;
  ClientListeners listeners;
  int tcp_fd;
  uint64_t tcp_socket_inode;  // 0 until a listener opens (planned ones: read_planned_socket)
  std::weak_ptr<Connection> connection;
  Deadline deadline;
  // Published on this process's links (link_channels.h), with or without a
  // listener beside it: a server linked with us comes that way.
  bool on_links = false;
};

// A server's request for a channel over a link, for the agent's thread.
struct LinkRequest {
  std::shared_ptr<transport::shm::PeerProcess> link;
  transport::shm::ChannelRequest request;
};

// epoll data: the offer's id, and which of its listeners spoke; or the
// wakeup (ids start at 1).
constexpr uint64_t kRdmaListener = uint64_t{1} << 63;
constexpr uint64_t kWakeup = 0;
// The longest sleep: expired offers are looked for this often.
constexpr std::chrono::milliseconds kLongestSleep{100};
// Once awake, the agent also opens the planned listeners due this much
// later: a busy client's connections then take one wakeup between them.
constexpr std::chrono::milliseconds kEarlyBy{10};

class UpgradeAgent : public HelperLock {
 public:
  void offer(Offer offer);
  void wake() const { wakeup_.signal(); }
  // On the background loop's thread: queued for the agent's, or refused at
  // once if no agent runs (then this process offers nothing).
  void channel_requested(std::shared_ptr<transport::shm::PeerProcess> link,
                         const transport::shm::ChannelRequest& request);
  // A link with a new peer process came up: every offer is published on it.
  void links_changed() {
    links_changed_.store(true, std::memory_order_release);
    wakeup_.signal();
  }
  // fork: the child has no agent thread; its copies of the listeners go.
  void forget_after_fork();
  void run();

 private:
  bool start_locked();
  bool watch_locked(int fd, uint64_t data);
  // Takes the offer's listeners out of the epoll set (closing them would too).
  void unwatch_locked(const Offer& offer);
  void answer_same_host(Offer offer);
  // A server linked with us asked for a channel to the offer's socket.
  static void answer_over_link(Offer offer, const LinkRequest& request);
  // The link requests queued, each with its offer taken out, or refused.
  void take_link_requests();
  // Publishes every offer whose socket is known on the links (new ones among them).
  void publish_offers_on_links();
  // On an attempt thread of its own, or the agent's (touches no agent state).
  static void answer_rdma(Offer offer);
  // Moves the offers `chosen` picks into `taken`, in one pass: a busy
  // client holds thousands of offers (one per connection of the last
  // upgrade_timeout).
  template <typename Choose>
  void take_offers_locked(std::vector<Offer>& taken, Choose chosen);
  void add_locked(Offer offer);
  // The offer with `id` (or published on links with `inode`), taken out.
  std::optional<Offer> take_locked(uint64_t id);
  std::optional<Offer> take_published_locked(uint64_t inode);
  void expire_locked(std::vector<Offer>& expired);
  // Offers whose planned rdma_cm listener is due: taken out, to be opened
  // without the lock (open_planned_listener puts them back).
  void take_planned_locked(std::vector<Offer>& due);
  void open_planned_listener(Offer offer);
  // Opens every planned listener due by now (within kEarlyBy): between
  // answers too, since one answer (an rdma_cm accept until established)
  // takes 30-250 ms over Soft-RoCE, and a listener opened after its server
  // came costs that connection its upgrade.
  void open_due_listeners();
  // How long the agent may sleep (and notes when it wakes at the latest).
  int sleep_ms_locked();

  std::unordered_map<uint64_t, Offer> offers_;                // by id
  std::unordered_map<uint64_t, uint64_t> published_by_inode_;  // ids of those on links
  uint64_t next_id_ = 1;
  int epoll_fd_ = -1;
  HelperWakeup wakeup_;
  // When the agent's sleep ends at the latest: an offer planned to listen
  // no sooner need not wake it (a context switch per connection otherwise).
  std::chrono::steady_clock::time_point wakes_by_{};
  bool running_ = false;
  std::vector<LinkRequest> link_requests_;
  std::atomic<bool> links_changed_{false};
};

UpgradeAgent& agent() { return fork_aware_instance<UpgradeAgent>(); }

// Closing a listener also takes it out of the agent's epoll set.
void close_listeners(ClientListeners& listeners) {
  if (listeners.same_host_fd >= 0) close_descriptor(listeners.same_host_fd);
  listeners.same_host_fd = -1;
  listeners.rdma.reset();
}

// The offer is answered or over: no server finds it on a link again.
void end_offer(Offer& offer) {
  close_listeners(offer.listeners);
  if (offer.on_links) transport::shm::withdraw_from_links(offer.tcp_socket_inode);
  offer.on_links = false;
}

void close_offer(Offer& offer, const char* reason) {
  end_offer(offer);
  if (auto connection = offer.connection.lock()) connection->decline(reason);
}

// On the links this process has (none is no failure: one may come up).
void publish_on_links(Offer& offer) {
  if (offer.tcp_socket_inode != 0 && transport::shm::offer_on_links(offer.tcp_socket_inode) > 0)
    offer.on_links = true;
}

void on_channel_request(std::shared_ptr<transport::shm::PeerProcess> link,
                        const transport::shm::ChannelRequest& request);
void on_links_changed();

void UpgradeAgent::offer(Offer offer) {
  // Not under the lock: the counts' first use registers fork handlers, and
  // a fork under way holds fork's lock while it waits for ours.
  prepare_attempt_threads();
  std::unique_lock lock(mutex_);
  if (!start_locked()) {
    lock.unlock();
    close_offer(offer, "the upgrade agent could not start");
    return;
  }
  offer.id = next_id_++;
  // A planned listener is opened later by the agent, which may be asleep
  // for longer than the plan allows.
  if (const auto planned = offer.listeners.next_planned(); planned && *planned < wakes_by_) {
    wakes_by_ = *planned;
    wakeup_.signal();
  }
  const bool watched =
      (offer.listeners.same_host_fd < 0 || watch_locked(offer.listeners.same_host_fd, offer.id)) &&
      (offer.listeners.rdma == nullptr ||
       watch_locked(offer.listeners.rdma->event_fd(), offer.id | kRdmaListener));
  if (!watched) {
    lock.unlock();
    close_offer(offer, "the upgrade agent could not watch the side channel");
    return;
  }
  publish_on_links(offer);
  add_locked(std::move(offer));
}

void UpgradeAgent::add_locked(Offer offer) {
  if (offer.on_links) published_by_inode_[offer.tcp_socket_inode] = offer.id;
  const uint64_t id = offer.id;
  offers_.emplace(id, std::move(offer));
}

std::optional<Offer> UpgradeAgent::take_locked(uint64_t id) {
  const auto found = offers_.find(id);
  if (found == offers_.end()) return std::nullopt;
  Offer offer = std::move(found->second);
  offers_.erase(found);
  if (offer.on_links) published_by_inode_.erase(offer.tcp_socket_inode);
  return offer;
}

std::optional<Offer> UpgradeAgent::take_published_locked(uint64_t inode) {
  const auto found = published_by_inode_.find(inode);
  if (found == published_by_inode_.end()) return std::nullopt;
  return take_locked(found->second);
}

void UpgradeAgent::channel_requested(std::shared_ptr<transport::shm::PeerProcess> link,
                                     const transport::shm::ChannelRequest& request) {
  std::optional<Offer> offer;
  {
    std::lock_guard lock(mutex_);
    if (running_ && has_forked_children()) {
      // A child may hold the socket: looking at it may take the agent 200 ms.
      link_requests_.push_back({std::move(link), request});
      wakeup_.signal();
      return;
    }
    if (running_) offer = take_published_locked(request.socket_inode);
    if (offer) unwatch_locked(*offer);
  }
  if (!offer) {
    refuse_link_channel(link, request, -ENOENT);
    return;
  }
  // Here on the loop's thread: nothing in the answer waits.
  answer_over_link(std::move(*offer), {std::move(link), request});
}

void UpgradeAgent::take_link_requests() {
  std::vector<LinkRequest> requests;
  {
    std::lock_guard lock(mutex_);
    requests.swap(link_requests_);
  }
  for (const LinkRequest& request : requests) {
    std::optional<Offer> offer;
    {
      std::lock_guard lock(mutex_);
      offer = take_published_locked(request.request.socket_inode);
      if (offer) unwatch_locked(*offer);
    }
    if (!offer) {
      refuse_link_channel(request.link, request.request, -ENOENT);
      continue;
    }
    answer_over_link(std::move(*offer), request);
    open_due_listeners();
  }
}

void UpgradeAgent::publish_offers_on_links() {
  std::lock_guard lock(mutex_);
  for (auto& [id, offer] : offers_) {
    publish_on_links(offer);
    if (offer.on_links) published_by_inode_[offer.tcp_socket_inode] = id;
  }
}

bool UpgradeAgent::watch_locked(int fd, uint64_t data) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = data;
  return next::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) == 0;
}

void UpgradeAgent::unwatch_locked(const Offer& offer) {
  if (offer.listeners.same_host_fd >= 0)
    next::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, offer.listeners.same_host_fd, nullptr);
  if (offer.listeners.rdma != nullptr)
    next::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, offer.listeners.rdma->event_fd(), nullptr);
}

bool UpgradeAgent::start_locked() {
  if (running_) return true;
  epoll_fd_ = keep_own_descriptor(next::epoll_create1(EPOLL_CLOEXEC));
  if (epoll_fd_ < 0) return false;
  int error = wakeup_.open() < 0 || !watch_locked(wakeup_.fd(), kWakeup) ? -1 : 0;
  if (error == 0) error = start_helper_thread("qpsock-agent", [] { agent().run(); });
  if (error != 0) {
    QPSOCK_LOG(warn, "cannot start the upgrade agent thread (%d): connections stay on TCP", error);
    wakeup_.close();
    close_descriptor(epoll_fd_);
    epoll_fd_ = -1;
    return false;
  }
  running_ = true;
  transport::shm::set_channel_request_handler(&on_channel_request);
  transport::shm::set_link_up_handler(&on_links_changed);
  return true;
}

template <typename Choose>
void UpgradeAgent::take_offers_locked(std::vector<Offer>& taken, Choose chosen) {
  for (auto each = offers_.begin(); each != offers_.end();) {
    if (!chosen(each->second)) {
      ++each;
      continue;
    }
    if (each->second.on_links) published_by_inode_.erase(each->second.tcp_socket_inode);
    taken.push_back(std::move(each->second));
    each = offers_.erase(each);
  }
}

void UpgradeAgent::expire_locked(std::vector<Offer>& expired) {
  const auto now = std::chrono::steady_clock::now();
  take_offers_locked(expired, [now](const Offer& offer) {
    return offer.deadline <= now || offer.connection.expired();
  });
}

// A planned same-host listener is opened before its time for a connection
// that has moved half of shm_upgrade_bytes over TCP: its server will try early.
bool moved_enough_to_listen(const Offer& offer) {
  if (!offer.listeners.planned_same_host) return false;
  const std::shared_ptr<Connection> connection = offer.connection.lock();
  return connection != nullptr &&
         connection->offered_tcp_bytes() >= shm_upgrade_bytes() / 2;
}

void UpgradeAgent::take_planned_locked(std::vector<Offer>& due) {
  const auto soon = std::chrono::steady_clock::now() + kEarlyBy;
  take_offers_locked(due, [soon](const Offer& offer) {
    const auto planned = offer.listeners.next_planned();
    return planned && (*planned <= soon || moved_enough_to_listen(offer));
  });
}

void UpgradeAgent::open_due_listeners() {
  std::vector<Offer> due;
  {
    std::lock_guard lock(mutex_);
    take_planned_locked(due);
  }
  for (Offer& offer : due) open_planned_listener(std::move(offer));
}

// A planned offer's socket identity, read as its listener opens. A socket
// renumbered meanwhile is not followed: it stays on TCP.
bool read_planned_socket(Offer& offer) {
  if (offer.tcp_socket_inode != 0) return true;
  const std::shared_ptr<Connection> connection = offer.connection.lock();
  return connection != nullptr &&
         connection_socket_inode(offer.tcp_fd, *connection, offer.tcp_socket_inode) == 0;
}

// A planned rdma_cm listener's plan, read from the socket under its current
// number. 0, -ENOTCONN once the socket is gone (no line to log), or -errno
// with `reason`.
int plan_rdma_listener(const Offer& offer, RdmaListenerPlan& plan, const char*& reason) {
  const std::shared_ptr<Connection> connection = offer.connection.lock();
  if (connection == nullptr) return -ENOTCONN;
  KeptFd tcp;
  return read_socket(*connection, offer.tcp_fd, offer.tcp_socket_inode,
                     [&](int fd) { return prepare_planned_verbs_offer(fd, plan, reason); }, tcp);
}

void UpgradeAgent::open_planned_listener(Offer offer) {
  // Closed while an answer ran: never opened.
  if (offer.connection.expired() || !read_planned_socket(offer)) {
    close_offer(offer, "closed before its upgrade");
    return;
  }
  if (const std::shared_ptr<Connection> connection = offer.connection.lock();
      connection != nullptr && declined_for_io_uring(offer.tcp_fd, *connection)) {
    end_offer(offer);
    return;
  }
  const bool same_host = offer.listeners.planned_same_host.has_value();
  if (same_host) publish_on_links(offer);
  const char* reason = nullptr;
  int error = 0;
  if (own_descriptors_recently_refused()) {
    // Its server would find no listener: no handshake begins to fail halfway.
    error = -EMFILE;
    reason = "no descriptor for the upgrade (RLIMIT_NOFILE)";
  } else if (same_host) {
    error = open_same_host_listener(offer.tcp_socket_inode, offer.listeners, reason);
  } else {
    offer.listeners.planned_rdma.reset();
    RdmaListenerPlan plan;
    error = plan_rdma_listener(offer, plan, reason);
    if (error == -ENOTCONN) {
      close_offer(offer, "closed before its upgrade");
      return;
    }
    if (error == 0) error = open_verbs_listener(offer.tcp_fd, plan, offer.listeners.rdma, reason);
  }
  offer.listeners.planned_same_host.reset();
  if (error < 0 && !(same_host && is_descriptor_limit(error))) {
    QPSOCK_LOG(info, "fd %d: %s (%d); stays on TCP", offer.tcp_fd, reason, error);
    close_offer(offer, reason);
    return;
  }
  // Without a descriptor for a listener the offer still stands on the
  // links, which need none: now, or once a link with the server comes up.
  if (error < 0) QPSOCK_LOG(debug, "fd %d: %s (%d); offered on links only", offer.tcp_fd, reason, error);
  std::unique_lock lock(mutex_);
  const bool watched = offer.listeners.same_host_fd >= 0
                           ? watch_locked(offer.listeners.same_host_fd, offer.id)
                           : offer.listeners.rdma == nullptr ||
                                 watch_locked(offer.listeners.rdma->event_fd(), offer.id | kRdmaListener);
  if (!watched) {
    lock.unlock();
    close_offer(offer, "the upgrade agent could not watch the side channel");
    return;
  }
  add_locked(std::move(offer));
}

int UpgradeAgent::sleep_ms_locked() {
  const auto now = std::chrono::steady_clock::now();
  auto wake_at = now + kLongestSleep;
  for (const auto& [id, offer] : offers_)
    if (const auto planned = offer.listeners.next_planned()) wake_at = std::min(wake_at, *planned);
  const auto sleep = std::chrono::ceil<std::chrono::milliseconds>(wake_at - now);
  wakes_by_ = now + sleep;
  return static_cast<int>(std::max<int64_t>(0, sleep.count()));
}

void UpgradeAgent::run() {
  for (;;) {
    epoll_event events[8];
    int sleep_ms = 0;
    {
      std::lock_guard lock(mutex_);
      sleep_ms = sleep_ms_locked();
    }
    const int ready = next::epoll_wait(epoll_fd_, events, 8, sleep_ms);
    std::vector<Offer> expired, same_host, rdma;
    {
      std::lock_guard lock(mutex_);
      for (int index = 0; index < ready; ++index) {
        if (events[index].data.u64 == kWakeup) {
          wakeup_.sleep(0);
          continue;
        }
        const uint64_t id = events[index].data.u64 & ~kRdmaListener;
        std::optional<Offer> offer = take_locked(id);
        if (!offer) continue;
        const bool by_rdma = (events[index].data.u64 & kRdmaListener) != 0;
        // Answered on another thread, which takes the connect request
        // later: until then the listener's fd stays readable, and this
        // thread's wait would return at once for it.
        if (by_rdma) unwatch_locked(*offer);
        (by_rdma ? rdma : same_host).push_back(std::move(*offer));
      }
      // Closed connections first: their planned listeners are never opened.
      expire_locked(expired);
    }
    if (links_changed_.exchange(false, std::memory_order_acq_rel)) publish_offers_on_links();
    take_link_requests();
    for (Offer& offer : expired) {
      if (!offer.connection.expired())
        QPSOCK_LOG(debug, "fd %d: no qpsock server came to upgrade it; it stays on TCP", offer.tcp_fd);
      close_offer(offer, "no qpsock peer came within upgrade_timeout");
    }
    open_due_listeners();
    for (Offer& offer : same_host) {
      answer_same_host(std::move(offer));
      open_due_listeners();
    }
    for (Offer& offer : rdma) {
      // On a thread of its own while few are under way: an accept waits
      // until established, and this thread must meanwhile open the
      // listeners that fall due and answer the servers that come.
      auto taken = std::make_shared<Offer>(std::move(offer));
      std::function<void()> answer = [taken] { answer_rdma(std::move(*taken)); };
      if (!run_attempt_on_own_thread(AttemptKind::client_accept, answer)) answer();
      open_due_listeners();
    }
  }
}

// One server came on this host: answer it, then the listeners are done either way.
void UpgradeAgent::answer_same_host(Offer offer) {
  const int side_fd = keep_own_descriptor(
      next::accept4(offer.listeners.same_host_fd, nullptr, nullptr, SOCK_CLOEXEC));
  end_offer(offer);
  std::shared_ptr<Connection> connection = offer.connection.lock();
  if (side_fd >= 0 && connection != nullptr &&
      declined_for_a_forked_child(*connection, offer.tcp_fd, offer.tcp_socket_inode)) {
    close_descriptor(side_fd);
    return;
  }
  if (side_fd < 0 || connection == nullptr || !connection->begin_negotiation()) {
    if (side_fd >= 0) close_descriptor(side_fd);
    if (connection) connection->decline("the side channel failed");
    return;
  }
  if (declined_for_a_forked_child(*connection, offer.tcp_fd, offer.tcp_socket_inode)) {
    close_descriptor(side_fd);
    return;
  }
  // The application may have renumbered the socket, or closed it and reused the number.
  KeptFd tcp;
  uint64_t peer_inode = 0;
  int result = read_socket(*connection, offer.tcp_fd, offer.tcp_socket_inode, [&peer_inode](int fd) {
    return find_peer_socket_inode(fd, peer_inode);
  }, tcp);
  if (result == 0) result = run_handshake(*connection, tcp, side_fd, peer_inode, offer.deadline);
  close_descriptor(side_fd);
  if (result < 0) {
    QPSOCK_LOG(info, "fd %d: upgrade declined (%d); the connection stays on TCP", offer.tcp_fd, result);
    connection->decline("the upgrade handshake failed");
    return;
  }
  QPSOCK_LOG(info, "fd %d: upgraded to shared memory", tcp.fd);
}

// A server came over rdma_cm: accept it, then the listeners are done either way.
void UpgradeAgent::answer_rdma(Offer offer) {
  std::unique_ptr<transport::verbs::VerbsListener> listener = std::move(offer.listeners.rdma);
  end_offer(offer);
  std::shared_ptr<Connection> connection = offer.connection.lock();
  // Declined before the accept: the server's connect is rejected, and it stays on TCP.
  if (connection == nullptr ||
      declined_for_a_forked_child(*connection, offer.tcp_fd, offer.tcp_socket_inode) ||
      !connection->begin_negotiation() ||
      declined_for_a_forked_child(*connection, offer.tcp_fd, offer.tcp_socket_inode))
    return;
  if (accept_verbs_upgrade(*listener, *connection, offer.tcp_fd, offer.tcp_socket_inode,
                           offer.deadline) < 0)
    connection->decline("the RDMA upgrade failed");
}

void UpgradeAgent::answer_over_link(Offer offer, const LinkRequest& request) {
  end_offer(offer);
  std::shared_ptr<Connection> connection = offer.connection.lock();
  if (connection == nullptr ||
      declined_for_a_forked_child(*connection, offer.tcp_fd, offer.tcp_socket_inode) ||
      !connection->begin_negotiation() ||
      declined_for_a_forked_child(*connection, offer.tcp_fd, offer.tcp_socket_inode)) {
    refuse_link_channel(request.link, request.request, -ECONNREFUSED);
    return;
  }
  // The application may have renumbered the socket, or closed it and reused the number.
  KeptFd tcp;
  int result = read_socket(*connection, offer.tcp_fd, offer.tcp_socket_inode, [](int) { return 0; }, tcp);
  if (result < 0)
    refuse_link_channel(request.link, request.request, result);
  else
    result = accept_link_channel(*connection, tcp, request.link, request.request);
  if (result < 0) {
    QPSOCK_LOG(info, "fd %d: upgrade over the link with pid %d declined (%d); the connection stays on TCP",
               offer.tcp_fd, request.link->pid(), result);
    connection->decline("the upgrade over the link failed");
    return;
  }
  QPSOCK_LOG(info, "fd %d: upgraded to shared memory (over the link with pid %d)", tcp.fd,
             request.link->pid());
}

void UpgradeAgent::forget_after_fork() {
  for (auto& [id, offer] : offers_) {
    if (offer.listeners.same_host_fd >= 0) close_descriptor(offer.listeners.same_host_fd);
    if (offer.listeners.rdma != nullptr) {
      // Destroying the listener's rdma_cm id from here would destroy the
      // parent's (the rdma_cm file is shared across fork): only our copy of
      // its fd goes, and the object is left behind.
      close_descriptor(offer.listeners.rdma->event_fd());
      (void)offer.listeners.rdma.release();
    }
  }
  offers_.clear();
  published_by_inode_.clear();
  link_requests_.clear();
  if (epoll_fd_ >= 0) close_descriptor(epoll_fd_);
  epoll_fd_ = -1;
  wakeup_.close();
  running_ = false;
}

void on_channel_request(std::shared_ptr<transport::shm::PeerProcess> link,
                        const transport::shm::ChannelRequest& request) {
  agent().channel_requested(std::move(link), request);
}

void on_links_changed() { agent().links_changed(); }

}  // namespace

void wake_upgrade_agent() { agent().wake(); }

std::optional<std::chrono::steady_clock::time_point> ClientListeners::next_planned() const {
  if (planned_same_host) return planned_same_host;
  return planned_rdma;
}

void offer_upgrade(ClientListeners listeners, int tcp_fd, uint64_t tcp_socket_inode,
                   std::weak_ptr<Connection> connection, Deadline deadline) {
  agent().offer(Offer{0, std::move(listeners), tcp_fd, tcp_socket_inode, std::move(connection),
                      deadline});
}

}  // namespace qpsock::upgrade
