// Blocking waits: spin on the transport (for as long as SpinBudget says),
// then arm it (naming the thread's waker when it sleeps alone on the
// stream) and sleep in poll(2) on its wait handle, if it has one, the
// thread's waker and the TCP control fd. No lock is held while sleeping.
#include <cerrno>
#include <thread>

#include "libc/next_symbols.h"
#include "stream/stream.h"

namespace qpsock::stream {

namespace {

// A spinning wait yields the core now and then, for a thread that shares it
// (the peer process on a one-core host, another thread of the application),
// but not at every poll: sched_yield is a system call, a few microseconds
// under emulation, and a completion that lands while it runs is seen only
// after it. Over Soft-RoCE in a TCG VM a poll took 4.5 us with a yield each
// time and 1.2 us without, and the 64-byte half round trip 35-36 us against
// 32.8 (docs/performance.md).
constexpr std::chrono::microseconds kSpinYieldInterval{20};

int poll_timeout(std::optional<std::chrono::steady_clock::time_point> deadline) {
  if (!deadline) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(
      *deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<int64_t>(left.count(), 0));
}

}  // namespace

int Stream::wait_until(StateLock& state, FunctionRef<bool()> ready, const WaitOptions& options) {
  const auto& deadline = options.deadline;
  auto done = [&] { return ready() || (broken_ && options.until_broken); };
  const auto started = Clock::now();
  auto spin_until = started + (options.adaptive_spin ? SpinBudget::Duration(spin_budget_.next())
                                                     : SpinBudget::Duration(settings_.spin_time));
  auto yield_at = started + kSpinYieldInterval;
  for (bool waited = false;; waited = true) {
    // Never sleep on bytes the peer has not been told about, nor on held
    // bytes the peer has room for.
    flush_unnotified_locked();
    progress_locked();
    try_push_send_backlog_locked(state);
    if (done()) {
      // How long an answer took teaches the next wait how long to stay awake.
      if (options.adaptive_spin && waited && !broken_)
        spin_budget_.on_answered(Clock::now() - started);
      return 0;
    }
    const auto now = Clock::now();
    if (deadline && now >= *deadline) return -ETIMEDOUT;
    if (now < spin_until && core_sharing_.may_spin(now)) {
      if (now < yield_at) {
        state.unlock();
        state.lock();
        continue;
      }
      state.unlock();
      std::this_thread::yield();
      const auto yielded = Clock::now();
      state.lock();
      core_sharing_.on_yield(now, yielded);
      yield_at = core_sharing_.checking() ? yielded : yielded + kSpinYieldInterval;
      continue;
    }
    return_all_credit_locked();
    const ThreadSleep thread_sleep;  // consumed when it ends, after the removal below
    ThreadWaker* const waker = thread_sleep.waker();
    if (int error = arm_transport_locked(waker); error < 0) {
      // Without a wakeup we cannot sleep: the stream is broken.
      break_connection_locked(ECONNRESET, "arming the transport's wakeup failed");
      return broken_ && options.until_broken ? 0 : -ECONNRESET;
    }
    // A completion that raced the arm is seen here rather than slept on. If
    // there was one, it may have spent the arm (its wakeup is consumed with
    // it): look again and re-arm rather than sleep.
    if (progress_locked()) continue;

    pollfd fds[3] = {{transport_->wait_handle(), POLLIN, 0}, {thread_sleep.fd(), POLLIN, 0},
                     {-1, 0, 0}};
    nfds_t count = 2;
    // A number the application closed is never slept on again: another file
    // may have it now (common/kept_fd.h).
    if (watching_control_ && !still_kept(control_)) watching_control_ = false;
    const bool watch_control = watching_control_;
    const KeptFd control = control_;
    if (watch_control) fds[count++] = {control.fd, POLLIN, 0};
    wake_.add_sleeper(waker);
    state.unlock();
    const int polled = next::poll(fds, count, thread_sleep.bounded(poll_timeout(deadline)));
    const int poll_error = polled < 0 ? errno : 0;
    ControlVerdict verdict = ControlVerdict::keep_waiting;
    // What poll saw of a number closed meanwhile may be another file's.
    if (watch_control && fds[2].revents != 0 && still_kept(control))
      verdict = control_handler_(fds[2].revents);
    state.lock();
    wake_.remove_sleeper(waker);

    act_on_control_verdict_locked(verdict);
    if (poll_error == EINTR && options.interruptible) return -EINTR;
    // Anything else (one of our fds closed under us) would spin forever.
    if (poll_error != 0 && poll_error != EINTR)
      break_connection_locked(ECONNRESET, "waiting for the transport failed");
    spin_until = Clock::now() + settings_.spin_time;
  }
}

}  // namespace qpsock::stream
