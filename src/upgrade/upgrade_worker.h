// The per-process upgrade worker: a thread, started on first need, that runs
// a server's upgrade attempts when their delay is over (shm_upgrade_delay on
// one host, rdma_upgrade_delay between hosts), so that the application's
// first read or write never waits for the peer or the fabric. The connection
// goes on over TCP meanwhile; the mid-stream switch makes the moment of the
// upgrade invisible to the application. It never touches the data path.
//
// Separate from the upgrade agent (upgrade_agent.h): the agent answers this
// process's clients, and a process that is both ends of a connection must
// have its connect and its accept run at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

namespace qpsock::upgrade {

struct WorkerJob {
  std::function<void()> run;
  // Run once this has come (or up to 10 ms sooner, with others due then).
  std::chrono::steady_clock::time_point not_before{};
  // If given: the job is dropped unrun, and costs nothing more, once its
  // owner (the connection) is gone by its time.
  std::optional<std::weak_ptr<const void>> owner;
  // An attempt that waits on the fabric (an rdma_cm connect) runs on an
  // attempt thread of its own (attempt_threads.h) while few do; one that
  // only talks to a process on this host runs on the worker's thread.
  bool waits_on_fabric = true;
};

// Queues `job` for the worker: true, or false if the worker cannot run (the
// caller then declines the connection itself). Locks and allocates.
bool run_in_upgrade_worker(WorkerJob job);

// A server's claim of its upgrade attempt, made in the application's call on
// the socket, which may be a signal handler's.
struct ServerClaim {
  int fd = -1;
  // The claiming Connection's serial: the intake reads the socket's identity
  // itself, once it has found this very connection still at fd.
  uint64_t connection_serial = 0;
  std::chrono::steady_clock::time_point claimed_at{};
  // A claim made again, before the delay is over, by a connection that
  // moved enough bytes: tried on this host now, and left to the first
  // claim's job if the client is not there yet.
  bool early = false;
};

// What the worker does with each claim handed to it, on its own thread (where
// it may lock and allocate, e.g. queue a job). Set once, before any hand-over.
void set_server_claim_intake(void (*intake)(const ServerClaim& claim));

// Starts the worker if it does not run yet: true once it runs. Locks and
// allocates; call it where the application's call may (an accept).
bool start_upgrade_worker();
// Whether the worker runs (one load; false in a forked child until it starts its own).
bool upgrade_worker_running();

// Hands `claim` to the running worker, which passes it to the intake by
// `due` (the time its job is due): the worker is woken only if it would
// sleep past that (or its queue fills), so a busy server's claims cost one
// wakeup per delay, not one each. No lock, no allocation, only atomics and
// at most an eventfd write: safe in a signal handler. False if the worker
// does not run or holds too many claims.
bool hand_claim_to_upgrade_worker(const ServerClaim& claim, std::chrono::steady_clock::time_point due);

}  // namespace qpsock::upgrade
