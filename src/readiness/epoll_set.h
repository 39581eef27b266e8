// What qpsock keeps of one epoll instance of the application: the fds in it
// whose readiness the kernel cannot tell. Those are sockets that may be
// upgraded (their bytes move in a stream the kernel never sees) and epoll sets
// nested in this one that hold such sockets.
//
// A socket stays registered exactly as the application asked until its stream
// is installed. Then its registration is *converted*: the kernel watches the
// TCP socket edge-triggered with a cookie of ours as its data (the token, a
// FIN or a reset wake us), and the stream's transport wait handle (a
// transport without one tells the stream, which tells the signal) and the
// set's ReadinessSignal join the set. epoll_wait translates: it reports each
// converted socket's readiness from its stream, with the application's data,
// level-triggered, edge-triggered (again only when the stream's activity
// moved) or one-shot as registered. Cookies carry a tag in bits no user-space
// pointer has (docs/architecture.md says what that assumes of applications).
//
// Nothing spins: before sleeping in the kernel, every converted stream is
// armed, so a peer's write wakes the set through the wait handle (or,
// without one, through the signal), and our own threads' changes wake it
// through the signal.
#pragma once

#include <sys/epoll.h>
#include <signal.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "stream/readiness_signal.h"
#include "upgrade/connection.h"

namespace qpsock::readiness {

class EpollSet {
 public:
  explicit EpollSet(int epoll_fd) : epoll_fd_(epoll_fd) {}
  ~EpollSet();
  EpollSet(const EpollSet&) = delete;
  EpollSet& operator=(const EpollSet&) = delete;

  // epoll_ctl on an fd qpsock must watch: `connection` (a socket that may be
  // upgraded) or `nested` (an epoll set), one of them set. Results as the
  // system call's (0, or -1 with errno).
  int add(int fd, const epoll_event& event, std::shared_ptr<upgrade::Connection> connection,
          std::shared_ptr<EpollSet> nested);
  // false: fd is not watched here, the caller passes the call to the kernel.
  bool modify(int fd, const epoll_event& event, int& result);
  bool remove(int fd, int& result);
  // The application closed fd (or dup2 replaced it): its registration goes
  // with the socket's last fd, as in the kernel.
  void fd_closing(int fd);

  // False when nothing in the set needs qpsock (a wait on its fd is the kernel's).
  bool active();
  // epoll_wait/epoll_pwait/epoll_pwait2 (timeout null: forever).
  int wait(epoll_event* events, int capacity, const timespec* timeout, const sigset_t* mask);
  // A wait that went to the kernel without us (the set had no registration
  // of ours when it began) returned `count` events: takes ours out of them
  // (the next wait reports what they stood for); how many remain (0: wait
  // again).
  int take_cookies(epoll_event* events, int count);
  // Whether a wait must look at the set itself: it holds a watch, or the
  // kernel set holds a registration of ours.
  bool needs_us() const {
    return watch_count_.load(std::memory_order_acquire) > 0 ||
           has_cookies_.load(std::memory_order_acquire);
  }

  // For a wait that holds this set's fd (poll, or an epoll set holding this
  // one): arms the set's streams so that the set's fd becomes readable when
  // they change; true if something is ready already (then do not sleep).
  // Every prepare is followed by one finish_outer_sleep.
  bool prepare_outer_sleep();
  void finish_outer_sleep();

 private:
  struct Watch {
    uint64_t id = 0;
    size_t slot = 0;  // its place in watches_
    int fd = -1;  // -1 once closed while a dup keeps the socket registered
    uint32_t events = 0;
    epoll_data_t data{};
    std::shared_ptr<upgrade::Connection> connection;
    std::shared_ptr<EpollSet> nested;
    bool converted = false;
    uint64_t conversion = 0;           // its place in the set's conversions, once converted
    stream::Stream* stream = nullptr;  // once converted
    bool disabled = false;             // EPOLLONESHOT reported
    short control_revents = 0;         // what the kernel said of the TCP socket since
    uint64_t reported_activity = 0;    // edge-triggered: what the last report saw
    uint32_t reported_events = 0;
    uint64_t reported_round = 0;       // reported by this wait already
  };

  // The set's lock. A watch erased under it goes only once it is let go:
  // the last reference to a connection tears its transport down, which
  // closes fds through qpsock's own close (libibverbs closes its completion
  // channel with close(2)), and that close looks in the epoll sets again.
  class SetLock {
   public:
    explicit SetLock(EpollSet& set) : set_(set) { set_.mutex_.lock(); }
    ~SetLock() {
      std::vector<std::unique_ptr<Watch>> retired = std::move(set_.retired_);
      set_.retired_.clear();
      set_.translates_.store(set_.converted_ + set_.nested_ > 0, std::memory_order_release);
      set_.mutex_.unlock();
    }
    SetLock(const SetLock&) = delete;
    SetLock& operator=(const SetLock&) = delete;

   private:
    EpollSet& set_;
  };

  Watch* find_locked(int fd);
  // `closing`: the application closed the fd, which leaves the kernel's
  // registration to the socket's other fds (and to a parent process). The
  // watch goes when the SetLock is let go.
  void erase_locked(Watch& watch, bool closing = false);
  // Converts the watches whose stream has been installed since we looked.
  void convert_upgraded_locked();
  bool convert_locked(Watch& watch);
  void unconvert_locked(Watch& watch, bool closing);
  // In a forked child, a watch converted by the parent: its stream is the
  // parent's (upgrade::Connection::abandon_inherited_stream), and nothing here
  // may call into it or take its registrations out of the shared kernel set.
  static bool inherited(const Watch& watch) {
    return watch.converted && watch.connection != nullptr && watch.connection->inherited_stream();
  }
  // The application's events of a converted or nested watch, now.
  // After arm_locked, `progress` must be none (see Stream::readiness).
  uint32_t current_events_locked(Watch& watch, stream::Stream::Progress progress);
  // Fills events with the watches to report; how many. Only watches
  // converted by the set's `converted_by`-th conversion: one converted
  // later (by another thread's epoll_ctl during a kernel wait) may be in
  // that wait's answer under the application's registration already.
  int collect_locked(epoll_event* events, int capacity, uint64_t round,
                     stream::Stream::Progress progress = stream::Stream::Progress::make,
                     uint64_t converted_by = UINT64_MAX);
  // Arms every converted stream and nested set (and counts this waiter as
  // asleep); look at readiness after it, then sleep.
  void arm_locked();
  void disarm_locked();
  // A cookie event from the kernel.
  void take_kernel_event_locked(const epoll_event& event);
  int ensure_signal_locked();

  const int epoll_fd_;
  // Whether a wait must translate: the set holds a converted socket or a
  // nested set, or a stream was installed since it last looked (one of its
  // sockets may need converting). Until then the kernel's wait is the answer,
  // with only cookies taken out.
  bool translates_now() const {
    return translates_.load(std::memory_order_acquire) ||
           upgrade::stream_installations() != installations_seen_.load(std::memory_order_acquire);
  }

  // Set before the first registration of ours reaches the kernel; never cleared.
  std::atomic<bool> has_cookies_{false};
  // converted_ + nested_ > 0, as of the last time the lock was let go.
  std::atomic<bool> translates_{false};
  std::atomic<size_t> watch_count_{0};
  std::mutex mutex_;
  std::vector<std::unique_ptr<Watch>> watches_;
  // The watches by fd (those still under a number), and by id those the
  // kernel knows by a cookie (converted and nested): a set of thousands is
  // looked up per epoll_ctl and per cookie, never walked.
  std::vector<Watch*> by_fd_;
  std::unordered_map<uint64_t, Watch*> by_id_;
  void index_fd_locked(int fd, Watch* watch);
  std::vector<std::unique_ptr<Watch>> retired_;  // erased under the lock, freed after it
  uint64_t next_id_ = 1;
  uint64_t rounds_ = 0;
  uint64_t conversions_ = 0;
  std::atomic<uint64_t> installations_seen_{0};  // written under the lock
  size_t pending_ = 0;    // sockets not yet converted
  size_t converted_ = 0;
  size_t nested_ = 0;
  // Each stream's wait handle is in the kernel set once, however many of its
  // fds are watched.
  struct StreamUse {
    uint32_t users = 0;
    const upgrade::Connection* connection = nullptr;
  };
  std::unordered_map<stream::Stream*, StreamUse> stream_users_;
  std::shared_ptr<stream::ReadinessSignal> signal_;
  bool signal_registered_ = false;
  // A look switched a socket's receiving direction (upgraded_socket_events).
  bool switched_while_looking_ = false;
};

}  // namespace qpsock::readiness
