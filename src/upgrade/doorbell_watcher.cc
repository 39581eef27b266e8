#include "upgrade/doorbell_watcher.h"

#include <poll.h>
#include <sys/epoll.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>

#include "common/errno_guard.h"
#include "common/log.h"
#include "common/own_descriptor.h"
#include "libc/next_symbols.h"
#include "common/helper_thread.h"
#include "upgrade/connection.h"
#include "upgrade/connection_registry.h"

namespace qpsock::upgrade {
namespace {

class DoorbellWatcher : public HelperLock {
 public:
  void watch(KeptFd tcp);
  void run();
  void forget_after_fork();

 private:
  bool start_locked();

  int epoll_fd_ = -1;
  bool running_ = false;
  bool failed_ = false;  // no thread: stop trying
};

DoorbellWatcher& watcher() { return fork_aware_instance<DoorbellWatcher>(); }

void DoorbellWatcher::watch(KeptFd tcp) {
  ErrnoGuard errno_guard;
  std::lock_guard lock(mutex_);
  if (!start_locked()) return;
  const FdUse use(tcp);
  if (!use) return;  // closed: nothing left to watch
  const int fd = use.fd();
  // Edge-triggered: a FIN leaves the socket readable for good, and must not
  // keep the thread awake. Only the fd is kept: when it fires, the fd is
  // looked up again (a closed fd leaves the set with its socket; a stale
  // entry at worst makes some stream poll once more, which does no harm).
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
  event.data.fd = fd;
  if (next::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0 && errno != EEXIST)
    QPSOCK_LOG(warn, "fd %d: cannot watch for the peer's doorbell (%s): its cancels wait for "
               "this program's next call on the socket", fd, std::strerror(errno));
}

bool DoorbellWatcher::start_locked() {
  if (running_) return true;
  if (failed_) return false;
  epoll_fd_ = keep_own_descriptor(next::epoll_create1(EPOLL_CLOEXEC));
  if (epoll_fd_ >= 0 && start_helper_thread("qpsock-doorbell", [] { watcher().run(); }) == 0) {
    running_ = true;
    return true;
  }
  QPSOCK_LOG(warn, "cannot start the doorbell watcher thread: a peer's cancels wait for this "
             "program's next call on the socket");
  if (epoll_fd_ >= 0) next::close(epoll_fd_);
  epoll_fd_ = -1;
  failed_ = true;
  return false;
}

void DoorbellWatcher::run() {
  int epoll_fd;
  {
    std::lock_guard lock(mutex_);
    epoll_fd = epoll_fd_;
  }
  std::array<epoll_event, 16> events;
  for (;;) {
    const int count = next::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), -1);
    for (int index = 0; index < count; ++index) {
      const int fd = events[index].data.fd;
      const std::shared_ptr<Connection> connection = find_connection(fd);
      if (connection != nullptr) connection->answer_doorbell();
    }
  }
}

void DoorbellWatcher::forget_after_fork() {
  // The set is shared with the parent, whose thread goes on using it.
  if (epoll_fd_ >= 0) next::close(epoll_fd_);
  epoll_fd_ = -1;
  running_ = false;
}

}  // namespace

void watch_for_doorbells(KeptFd tcp) { watcher().watch(tcp); }

}  // namespace qpsock::upgrade
