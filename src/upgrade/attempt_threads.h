// Upgrade attempts that wait on the fabric run on threads of their own, a
// few at a time: a server's rdma_cm connect and a client's accept each wait
// 30-250 ms over Soft-RoCE, mostly for the peer, and run one after another
// by the worker or the agent they upgraded only as many of a burst of
// connections as fit in upgrade_timeout (13 of 32 asyncio connections).
// Past kMostAttemptsAtOnce of a kind under way, the caller runs the attempt
// itself, as before. Each kind has its own count, so that a process at both
// ends of its connections never has its accepts wait for its own connects.
#pragma once

#include <functional>

namespace qpsock::upgrade {

enum class AttemptKind : int { server_connect = 0, client_accept = 1 };

inline constexpr int kMostAttemptsAtOnce = 4;

// Starts `attempt` on a new helper thread if fewer than kMostAttemptsAtOnce
// of `kind` are under way: true. False, with `attempt` untouched, otherwise
// (or if no thread could start): the caller runs it.
bool run_attempt_on_own_thread(AttemptKind kind, std::function<void()>& attempt);

// How many attempts of `kind` run on their own threads now (for tests).
int attempts_under_way(AttemptKind kind);

// Makes the counts before the worker's or the agent's thread first needs
// them, from the application's thread that queues work for it (with no lock
// held): a count first made on a helper thread while the application forks
// would leave the child's copy of its construction under way, and the
// child's helper waiting on it for ever.
void prepare_attempt_threads();

}  // namespace qpsock::upgrade
