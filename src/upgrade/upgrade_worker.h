// The per-process upgrade worker: a thread, started on first need, that runs
// a server's attempts to upgrade over RDMA one after another, so that the
// application's first read or write never waits for the fabric (an rdma_cm
// connect to a plain client takes until its reject). The connection goes on
// over TCP meanwhile; the mid-stream switch makes the moment of the upgrade
// invisible to the application. It never touches the data path.
//
// Separate from the upgrade agent (upgrade_agent.h): the agent answers this
// process's clients, and a process that is both ends of a connection must
// have its connect and its accept run at once.
#pragma once

#include <chrono>
#include <functional>

namespace qpsock::upgrade {

// Queues `job` for the worker, to run once `not_before` has come (or up to
// 10 ms sooner, with others due then): true, or false if the worker cannot
// run (the caller then declines the connection itself).
bool run_in_upgrade_worker(std::function<void()> job,
                           std::chrono::steady_clock::time_point not_before = {});

}  // namespace qpsock::upgrade
