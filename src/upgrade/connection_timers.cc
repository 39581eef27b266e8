#include "upgrade/cork_flusher.h"

#include <deque>
#include <memory>
#include <mutex>

#include "common/log.h"
#include "upgrade/agent_thread.h"
#include "upgrade/connection.h"

namespace qpsock::upgrade {
namespace {

using Clock = std::chrono::steady_clock;

struct CorkedStream {
  Clock::time_point due;
  std::weak_ptr<Connection> connection;  // gone: nothing to announce
};

class CorkFlusher : public HelperLock {
 public:
  void schedule(std::weak_ptr<Connection> connection);
  void run();
  void forget_after_fork();

 private:
  bool start_locked();
  // Announces what is due; the time until the next one, or -1.
  int flush_due();

  std::deque<CorkedStream> corked_;  // in `due` order: every entry waits kCorkLimit
  HelperWakeup wakeup_;
  bool running_ = false;
  bool failed_ = false;  // no thread: stop trying
};

CorkFlusher& flusher() { return fork_aware_instance<CorkFlusher>(); }

void CorkFlusher::schedule(std::weak_ptr<Connection> connection) {
  std::lock_guard lock(mutex_);
  if (!start_locked()) return;
  const bool was_idle = corked_.empty();
  corked_.push_back({Clock::now() + kCorkLimit, std::move(connection)});
  // A sleeping thread with nothing to wait for must learn of the deadline.
  if (was_idle) wakeup_.signal();
}

bool CorkFlusher::start_locked() {
  if (running_) return true;
  if (failed_) return false;
  if (wakeup_.open() == 0 && start_agent_thread("qpsock-cork", [] { flusher().run(); }) == 0) {
    running_ = true;
    return true;
  }
  QPSOCK_LOG(warn, "cannot start the cork flusher thread: MSG_MORE data waits for the next call");
  wakeup_.close();
  failed_ = true;
  return false;
}

int CorkFlusher::flush_due() {
  for (;;) {
    CorkedStream due;
    {
      std::lock_guard lock(mutex_);
      if (corked_.empty()) return -1;
      const auto wait = corked_.front().due - Clock::now();
      if (wait > Clock::duration::zero())
        return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count());
      due = std::move(corked_.front());
      corked_.pop_front();
    }
    // Outside our lock: announcing takes the stream's.
    if (const std::shared_ptr<Connection> connection = due.connection.lock()) connection->flush_cork();
  }
}

void CorkFlusher::run() {
  for (;;) wakeup_.sleep(flush_due());
}

void CorkFlusher::forget_after_fork() {
  corked_.clear();
  wakeup_.close();
  running_ = false;
}

}  // namespace

void flush_cork_later(std::weak_ptr<Connection> connection) {
  flusher().schedule(std::move(connection));
}

}  // namespace qpsock::upgrade
