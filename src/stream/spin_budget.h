// How long a blocking wait for the peer's next bytes busy-polls before it
// sleeps. At least spin_time; when a connection's recent such waits were
// answered within spin_limit, long enough to cover nearly all of them: their
// smoothed mean and four times their mean deviation (a quarter of the mean at
// least, twice the mean at most), as TCP sizes its retransmission timeout
// (RFC 6298), up to spin_limit. A wakeup from sleep costs a few microseconds
// on real hardware but can cost a hundred or more where the fabric or the
// machine is slow (a software RoCE, an emulator), and a peer that answers
// within a round trip is worth waiting for awake. Covering only the mean is
// not enough where answers scatter (under emulation, by half their time and
// more): every answer later than the mean would pay a wakeup.
// Waits that take longer than spin_limit (an idle connection) bring the spin
// back down toward spin_time, so an idle program does not keep a core busy.
#pragma once

#include <chrono>

namespace qpsock::stream {

class SpinBudget {
 public:
  using Duration = std::chrono::nanoseconds;

  SpinBudget(Duration floor, Duration limit);

  // How long the next wait spins.
  Duration next() const { return budget_; }
  // A wait ended with what it waited for after `waited` (spinning, sleeping
  // or both).
  void on_answered(Duration waited);

 private:
  Duration floor_;
  Duration limit_;
  // Of the waits answered within the limit: a moving average, and a moving
  // average of how far each fell from it.
  Duration mean_{0};
  Duration deviation_{0};
  Duration budget_;
};

}  // namespace qpsock::stream
