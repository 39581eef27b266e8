// How long a blocking wait for the peer's next bytes busy-polls before it
// sleeps. At least spin_time; when a connection's recent such waits were
// answered within spin_limit, as long as they took and a quarter more, up to
// spin_limit: a wakeup from sleep
// costs a few microseconds on real hardware but can cost a hundred or more
// where the fabric or the machine is slow (a software RoCE, an emulator), and
// a peer that answers within a round trip is worth waiting for awake.
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
  Duration recent_{0};  // a moving average of the waits answered within the limit
  Duration budget_;
};

}  // namespace qpsock::stream
