// The children this process forked (or started with posix_spawn) while it
// had connections: a client's upgrade is answered later, in the agent or the
// upgrade worker of the process that connected, and a child forked before
// then may hold the socket and use it over TCP (`exec 3<>/dev/tcp/...; cat
// <&3` in a shell, a handler started with the socket as its stdin). The
// answer then declines: an upgrade would move the peer's bytes to a stream
// the child cannot read (docs/upgrade-protocol.md, "fork").
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace qpsock::upgrade {

class Connection;

// The fork wrapper (and posix_spawn's, whose program holds the sockets it
// inherited as a forked child does): before the fork, and after it with
// fork's result (the child's pid in the parent, 0 in the child, -1 when it
// failed).
void fork_starting();
void fork_finished(pid_t result);

// How many forks (and spawns, system and popen calls) this process has
// begun and ended: equal when none is under way. fork_starting counts one
// begun before the fork copies the process, fork_finished one ended after.
struct ForkCounts {
  uint64_t begun;
  uint64_t ended;
  bool fork_under_way() const { return begun != ended; }
};
ForkCounts fork_counts();

// Whether a child this process forked (one of the last 64 forked or spawned
// while it had connections: a process that starts many programs may push an
// old child out) keeps the socket with `inode`: one of the children that
// hold it now still holds it after up to 200 ms. A shell forks a child for
// every command substitution and program, each holding the socket until it
// exits or execs, most within milliseconds (and the next may be forked
// meanwhile: it is not waited for); a child that reads or writes the socket
// holds it for as long as it does. Waits for a fork under way to finish
// first, so that its child is looked at too.
bool forked_child_keeps_socket(uint64_t inode);

// Whether this process remembers a child (or a fork is under way): only
// then may forked_child_keeps_socket look at /proc or wait. Lock-free.
bool has_forked_children();

// The upgrade's answer to that, for a client's agent or a server's worker: a
// child forked since the connection was made keeps the socket, and may read
// or write it over TCP, where an upgrade would move the peer's bytes out of
// its sight. The child's copy is never upgraded (it has no agent, and a
// server's claimed attempt is the parent's), so the connection stays on TCP
// for both: declined here, with a line in the log. Looked at before the
// negotiation begins (a child forked while it runs has its calls refused,
// whatever its outcome) and once more right after, for a child forked in
// between. False: go on.
bool declined_for_a_forked_child(Connection& connection, int tcp_fd, uint64_t tcp_socket_inode);

// A server's attempt about to begin: declined if this process forked (or
// started a program) since the attempt was claimed
// (Connection::forked_since_claimed).
// The child's copy stays on TCP, and so may a grandchild's after the child
// has exited, where no look at this process's children would find it.
// False: go on.
bool declined_for_a_fork_since_claimed(Connection& connection, int tcp_fd);

}  // namespace qpsock::upgrade
