#include "upgrade/upgrade_agent.h"

#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "common/log.h"
#include "libc/next_symbols.h"
#include "upgrade/handshake.h"
#include "upgrade/socket_identity.h"

namespace qpsock::upgrade {
namespace {

struct Offer {
  int listener_fd;
  int tcp_fd;
  uint64_t tcp_socket_inode;
  std::weak_ptr<Connection> connection;
  Deadline deadline;
};

class UpgradeAgent {
 public:
  void offer(Offer offer);
  // fork: the child has no agent thread; its copies of the listeners go.
  void forget_after_fork();
  void lock() { mutex_.lock(); }
  void unlock() { mutex_.unlock(); }

 private:
  bool start_locked();
  void run();
  void answer(Offer offer);
  void expire_locked(std::vector<Offer>& expired);

  std::mutex mutex_;
  std::vector<Offer> offers_;
  int epoll_fd_ = -1;
  bool running_ = false;
};

UpgradeAgent& agent() {
  alignas(UpgradeAgent) static unsigned char storage[sizeof(UpgradeAgent)];
  static UpgradeAgent* instance = [] {
    auto* created = ::new (storage) UpgradeAgent;
    pthread_atfork([] { agent().lock(); }, [] { agent().unlock(); },
                   [] {
                     agent().unlock();
                     agent().forget_after_fork();
                   });
    return created;
  }();
  return *instance;
}

void close_offer(const Offer& offer, const char* reason) {
  next::close(offer.listener_fd);
  if (auto connection = offer.connection.lock()) connection->decline(reason);
}

void UpgradeAgent::offer(Offer offer) {
  std::unique_lock lock(mutex_);
  if (!start_locked()) {
    lock.unlock();
    close_offer(offer, "the upgrade agent could not start");
    return;
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = offer.listener_fd;
  if (next::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, offer.listener_fd, &event) != 0) {
    lock.unlock();
    close_offer(offer, "the upgrade agent could not watch the side channel");
    return;
  }
  offers_.push_back(std::move(offer));
}

bool UpgradeAgent::start_locked() {
  if (running_) return true;
  epoll_fd_ = next::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) return false;
  // The agent must never take the application's signals.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_t thread;
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  const int created = pthread_create(
      &thread, &attributes,
      [](void*) -> void* {
        agent().run();
        return nullptr;
      },
      nullptr);
  pthread_attr_destroy(&attributes);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (created != 0) {
    QPSOCK_LOG(warn, "cannot start the upgrade agent thread (%d): connections stay on TCP", created);
    next::close(epoll_fd_);
    epoll_fd_ = -1;
    return false;
  }
  pthread_setname_np(thread, "qpsock-agent");
  running_ = true;
  return true;
}

void UpgradeAgent::expire_locked(std::vector<Offer>& expired) {
  const auto now = std::chrono::steady_clock::now();
  for (size_t index = 0; index < offers_.size();) {
    if (offers_[index].deadline <= now || offers_[index].connection.expired()) {
      expired.push_back(std::move(offers_[index]));
      offers_.erase(offers_.begin() + static_cast<std::ptrdiff_t>(index));
    } else {
      ++index;
    }
  }
}

void UpgradeAgent::run() {
  for (;;) {
    epoll_event events[8];
    const int ready = next::epoll_wait(epoll_fd_, events, 8, 100);
    std::vector<Offer> expired, answering;
    {
      std::lock_guard lock(mutex_);
      for (int index = 0; index < ready; ++index) {
        for (size_t each = 0; each < offers_.size(); ++each) {
          if (offers_[each].listener_fd != events[index].data.fd) continue;
          answering.push_back(std::move(offers_[each]));
          offers_.erase(offers_.begin() + static_cast<std::ptrdiff_t>(each));
          break;
        }
      }
      expire_locked(expired);
    }
    for (const Offer& offer : expired) {
      QPSOCK_LOG(debug, "fd %d: no qpsock server came to upgrade it; it stays on TCP", offer.tcp_fd);
      close_offer(offer, "no qpsock peer came within upgrade_timeout");
    }
    for (Offer& offer : answering) answer(std::move(offer));
  }
}

// One server came: answer it, then the listener is done either way.
void UpgradeAgent::answer(Offer offer) {
  const int side_fd = next::accept4(offer.listener_fd, nullptr, nullptr, SOCK_CLOEXEC);
  next::close(offer.listener_fd);
  std::shared_ptr<Connection> connection = offer.connection.lock();
  if (side_fd < 0 || connection == nullptr || !connection->begin_negotiation()) {
    if (side_fd >= 0) next::close(side_fd);
    if (connection) connection->decline("the side channel failed");
    return;
  }
  // The application may have closed the fd and reused its number since.
  uint64_t inode = 0, peer_inode = 0;
  int result = socket_inode_of_fd(offer.tcp_fd, inode);
  if (result == 0 && inode != offer.tcp_socket_inode) result = -ENOTCONN;
  if (result == 0) result = find_peer_socket_inode(offer.tcp_fd, peer_inode);
  if (result == 0) result = run_handshake(*connection, offer.tcp_fd, side_fd, peer_inode, offer.deadline);
  next::close(side_fd);
  if (result < 0) {
    QPSOCK_LOG(info, "fd %d: upgrade declined (%d); the connection stays on TCP", offer.tcp_fd, result);
    connection->decline("the upgrade handshake failed");
    return;
  }
  QPSOCK_LOG(info, "fd %d: upgraded to shared memory", offer.tcp_fd);
}

void UpgradeAgent::forget_after_fork() {
  for (const Offer& offer : offers_) next::close(offer.listener_fd);
  offers_.clear();
  if (epoll_fd_ >= 0) next::close(epoll_fd_);
  epoll_fd_ = -1;
  running_ = false;
}

}  // namespace

void offer_upgrade(int listener_fd, int tcp_fd, uint64_t tcp_socket_inode,
                   std::weak_ptr<Connection> connection, Deadline deadline) {
  agent().offer(Offer{listener_fd, tcp_fd, tcp_socket_inode, std::move(connection), deadline});
}

}  // namespace qpsock::upgrade
