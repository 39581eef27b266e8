// The helper threads of the upgrade (the agent that answers for clients, the
// worker that tries for servers) start the same way: detached, named, and
// with every signal blocked, so that they never take the application's.
#pragma once

namespace qpsock::upgrade {

// Starts `run` on a new detached thread called `name` (at most 15
// characters): 0, or the pthread_create error (positive, as pthreads gives it).
int start_agent_thread(const char* name, void (*run)());

}  // namespace qpsock::upgrade
