// Whether a spinning wait may spin, where the peer's process may run on our
// very core (shared memory: Transport::peer_may_share_core). There a spin
// holds up the answer it waits for: the peer runs only once we yield. Two
// processes pinned to one core took 23-25 us per 64-byte half round trip
// over shared memory while each spun and yielded every 20 us, against 10 us
// over kernel TCP, and 8 us with this backoff (docs/performance.md).
//
// The sign is the yields: one that returns later than kRanAnotherThread ran
// another thread on our core. Two in a row, in one wait or across waits
// (once could be the host preempting a virtual CPU), and the stream's waits
// stop spinning for kPause: they sleep at once, then try spinning again.
// Not for Soft-RoCE or other kernel transports, whose kernel threads run
// after a yield too: with this rule, processes on separate vCPUs slept
// through most answers there (250 us half round trips against 100).
#pragma once

#include <chrono>

namespace qpsock::stream {

class CoreSharingBackoff {
 public:
  using Clock = std::chrono::steady_clock;
  // A yield with nothing else to run takes well under a microsecond natively
  // and a few under emulation.
  static constexpr std::chrono::microseconds kRanAnotherThread{10};
  static constexpr std::chrono::milliseconds kPause{10};

  // `applies`: the peer may share our core; otherwise spinning is never
  // paused.
  explicit CoreSharingBackoff(bool applies) : applies_(applies) {}

  bool may_spin(Clock::time_point now) const { return now >= spin_resumes_at_; }
  // A yield that began at `began` returned at `returned`.
  void on_yield(Clock::time_point began, Clock::time_point returned);
  // The last yield ran another thread: yield again at the next poll, to see
  // whether it was the host or a thread on our core.
  bool checking() const { return last_ran_another_; }

 private:
  bool applies_;
  bool last_ran_another_ = false;
  Clock::time_point spin_resumes_at_{};
};

}  // namespace qpsock::stream
