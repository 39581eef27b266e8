// The timer thread: a queue of (due, action, connection), run in due order.
#include "upgrade/connection_timers.h"

#include <map>
#include <memory>
#include <mutex>

#include "common/log.h"
#include "common/helper_thread.h"
#include "upgrade/connection.h"
#include "upgrade/lingering_close.h"

namespace qpsock::upgrade {
namespace {

using Clock = std::chrono::steady_clock;

struct Due {
  ConnectionTimer timer;
  std::weak_ptr<Connection> connection;  // gone: nothing to do
};

class ConnectionTimers : public HelperLock {
 public:
  void schedule(ConnectionTimer timer, std::weak_ptr<Connection> connection, Clock::duration delay);
  void run();
  void forget_after_fork();

 private:
  bool start_locked();
  // Runs what is due; the time until the next one, or -1.
  int run_due();

  std::multimap<Clock::time_point, Due> due_;
  HelperWakeup wakeup_;
  bool running_ = false;
  bool failed_ = false;  // no thread: stop trying
};

ConnectionTimers& timers() { return fork_aware_instance<ConnectionTimers>(); }

void ConnectionTimers::schedule(ConnectionTimer timer, std::weak_ptr<Connection> connection,
                                Clock::duration delay) {
  std::lock_guard lock(mutex_);
  if (!start_locked()) return;
  const auto at = Clock::now() + delay;
  // A sleeping thread must learn of a deadline before the one it sleeps for.
  const bool sooner = due_.empty() || at < due_.begin()->first;
  due_.emplace(at, Due{timer, std::move(connection)});
  if (sooner) wakeup_.signal();
}

bool ConnectionTimers::start_locked() {
  if (running_) return true;
  if (failed_) return false;
  if (wakeup_.open() == 0 && start_helper_thread("qpsock-timer", [] { timers().run(); }) == 0) {
    running_ = true;
    return true;
  }
  QPSOCK_LOG(warn, "cannot start qpsock's timer thread: MSG_MORE data and requests for room wait "
                   "for the next call");
  wakeup_.close();
  failed_ = true;
  return false;
}

int ConnectionTimers::run_due() {
  for (;;) {
    Due due;
    {
      std::lock_guard lock(mutex_);
      if (due_.empty()) return -1;
      const auto wait = due_.begin()->first - Clock::now();
      if (wait > Clock::duration::zero())
        return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count());
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
    }
  }
}

void ConnectionTimers::run() {
  for (;;) wakeup_.sleep(run_due());
}

void ConnectionTimers::forget_after_fork() {
  due_.clear();
  wakeup_.close();
  running_ = false;
}

}  // namespace

void run_later(ConnectionTimer timer, std::weak_ptr<Connection> connection, Clock::duration delay) {
  timers().schedule(timer, std::move(connection), delay);
}

}  // namespace qpsock::upgrade
