// The connection timers: a queue of (due, action, connection), run in due
// order on the background loop's thread, woken by one timerfd set to the
// earliest.
#include "upgrade/connection_timers.h"

#include <sys/epoll.h>
#include <sys/timerfd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "common/background_loop.h"
#include "common/fork_aware_instance.h"
#include "common/log.h"
#include "common/own_descriptor.h"
#include "libc/next_symbols.h"
#include "upgrade/connection.h"
#include "upgrade/lingering_close.h"
#include "upgrade/link_upgrade.h"

namespace qpsock::upgrade {
namespace {

using Clock = std::chrono::steady_clock;

struct Due {
  ConnectionTimer timer;
  std::weak_ptr<Connection> connection;  // gone: nothing to do
};

class ConnectionTimers : public HelperLock {
 public:
  ConnectionTimers() { prepare_background_loop(); }  // its lock nests in ours

  void schedule(ConnectionTimer timer, std::weak_ptr<Connection> connection, Clock::duration delay);
  // The timerfd fired: runs what is due, then sets it for the next.
  void run_due();
  void forget_after_fork();

 private:
  bool start_locked();
  // Sets the timerfd to the earliest due (steady_clock is CLOCK_MONOTONIC).
  void set_timer_locked();

  std::multimap<Clock::time_point, Due> due_;
  int timer_fd_ = -1;
  bool failed_ = false;  // no timer: stop trying
};

ConnectionTimers& timers() { return fork_aware_instance<ConnectionTimers>(); }

void ConnectionTimers::schedule(ConnectionTimer timer, std::weak_ptr<Connection> connection,
                                Clock::duration delay) {
  std::lock_guard lock(mutex_);
  if (!start_locked()) return;
  const auto at = Clock::now() + delay;
  // The timer must fire for a deadline before the one it is set for.
  const bool sooner = due_.empty() || at < due_.begin()->first;
  due_.emplace(at, Due{timer, std::move(connection)});
  if (sooner) set_timer_locked();
}

bool ConnectionTimers::start_locked() {
  if (timer_fd_ >= 0) return true;
  if (failed_) return false;
  timer_fd_ = keep_own_descriptor(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  int error = timer_fd_ < 0 ? -errno : 0;
  // Edge-triggered: each expiry is one event, whether or not it is read.
  if (error == 0)
    error = watch_in_background(timer_fd_, EPOLLIN | EPOLLET,
                                [](uint64_t, uint32_t) { timers().run_due(); }, 0);
  if (error == 0) return true;
  QPSOCK_LOG(warn, "cannot set qpsock's connection timers (%s): MSG_MORE data and requests for "
             "room wait for the next call", strerrordesc_np(-error));
  if (timer_fd_ >= 0) close_descriptor(timer_fd_);
  timer_fd_ = -1;
  failed_ = true;
  return false;
}

void ConnectionTimers::set_timer_locked() {
  itimerspec when{};
  if (!due_.empty()) {
    const auto at = due_.begin()->first.time_since_epoch();
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(at);
    when.it_value.tv_sec = seconds.count();
    when.it_value.tv_nsec = std::chrono::duration_cast<std::chrono::nanoseconds>(at - seconds).count();
    // Zero would disarm it: the epoch's first nanosecond has long passed.
    if (when.it_value.tv_sec == 0 && when.it_value.tv_nsec == 0) when.it_value.tv_nsec = 1;
  }
  timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &when, nullptr);
}

void ConnectionTimers::run_due() {
  for (;;) {
    Due due;
    {
      std::lock_guard lock(mutex_);
      if (due_.empty() || due_.begin()->first > Clock::now()) {
        set_timer_locked();
        return;
      }
      due = std::move(due_.begin()->second);
      due_.erase(due_.begin());
    }
    // Outside our lock: the actions take the stream's.
    const std::shared_ptr<Connection> connection = due.connection.lock();
    if (!connection) continue;
    switch (due.timer) {
      case ConnectionTimer::flush_cork:
        connection->flush_cork();
        break;
      case ConnectionTimer::ask_for_room:
        connection->ask_for_room();
        break;
      case ConnectionTimer::linger:
        continue_lingering(connection);
        break;
      case ConnectionTimer::link_answer:
        link_answer_overdue(*connection);
        break;
    }
  }
}

void ConnectionTimers::forget_after_fork() {
  due_.clear();
  // The timerfd is the parent's too (its loop watches it).
  if (timer_fd_ >= 0) close_descriptor(timer_fd_);
  timer_fd_ = -1;
}

}  // namespace

void run_later(ConnectionTimer timer, std::weak_ptr<Connection> connection, Clock::duration delay) {
  timers().schedule(timer, std::move(connection), delay);
}

}  // namespace qpsock::upgrade
