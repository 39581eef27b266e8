// What the socket layer calls: offering connections for upgrade, finding the
// Connection behind an fd for a data call, and the end of a connection.
#pragma once

#include <sys/socket.h>

#include <memory>

#include "upgrade/connection.h"
#include "upgrade/connection_registry.h"
#include "upgrade/inherited_streams.h"

namespace qpsock::upgrade {

// A client socket that may be upgraded, just before its connect() to
// `destination` goes out: the side-channel listener (AF_UNIX for a peer on
// this host, rdma_cm for another) must exist before the server's first I/O.
void offer_client_upgrade(int fd, const sockaddr* destination, socklen_t length);
// connect() failed: nothing to upgrade.
void withdraw_upgrade(int fd);
// An accepted connection that may be upgraded at its first I/O in this
// process (over shared memory if the client is on this host, else over RDMA).
// Its Connection is made only then (connection_registry.h, offer_unclaimed),
// and takes the statistics handle `statistics_of` gives for its fd.
void offer_server_upgrade(int fd, stats::Handle (*statistics_of)(int fd));
// fd's offer, if it holds one, made a Connection of this process (its
// first I/O does that); else fd's Connection, or an empty hold. For the
// calls that must see any Connection a socket may have: passing it to
// another process, duplicating it, watching it.
ConnectionHold claim_offered_connection(int fd);

// An accepted socket added to an epoll set in this process: its upgrade
// starts now if the peer is on another host (handed to the upgrade worker:
// nothing waits here). A same-host peer is met at the first I/O, as before:
// its handshake runs in the calling thread, which here is often an event
// loop's only one.
void begin_server_upgrade_when_watched(int fd);

// The application's call on `fd` moved bytes over TCP while the upgrade was
// still offered, bringing this end's count from `before` to `after`. A
// delayed same-host upgrade begins early for a connection that moves
// shm_upgrade_bytes: the client opens its listener at half of them, the
// server tries at each doubling (1, 2, 4... times) until the delay's own
// attempt. Safe in a signal handler: atomics and an eventfd write.
void moved_over_tcp_while_offered(int fd, Connection& connection, uint64_t before, uint64_t after);

// The Connection a data call on `fd` must go through, or null (a plain
// socket, or one that stays on TCP). A server's first call tries the upgrade.
ConnectionHold connection_for_io(int fd);

// dup, dup2, dup3, F_DUPFD: destination now refers to source's socket (and
// its Connection). A socket it referred to before, still open under another
// fd, is watched through that one.
void connection_copied(int source, int destination);
// close(): the last fd of this process on an upgraded socket ends its stream
// (and makes the kernel reset the connection if data was left unread).
void connection_closing(int fd);
// exec(3) is about to replace the process image. An upgraded connection of
// this process (not one inherited across fork) whose fd survives it cannot
// go on (its stream lives in this image's memory, and moving it back to TCP
// is not built yet): it is reset, so that both ends see an error instead of
// a silently broken stream. A connection whose stream is another process's
// (inherited across fork) is left alone, and named in `inherited` for the
// new program when its fd survives.
void connections_before_exec(InheritedStreamsMarker& inherited);
// Before posix_spawn, system or popen starts a program that inherits this
// process's fds: every upgraded connection is named in `inherited` (those
// marked close-on-exec too: the spawn's file actions may dup2 one onto the
// program's stdin or stdout), so that the new program refuses it (its stream
// stays this process's, which goes on using it) rather than find an empty
// TCP socket. The program looks up only the sockets it holds.
void connections_before_spawn(InheritedStreamsMarker& inherited);
// sendmsg or sendmmsg on `carrier_fd` with `flags` is about to pass the fds
// of `message` to another process (SCM_RIGHTS), which will do I/O on them
// that this process's qpsock never sees. A connection not yet upgraded stays
// on TCP for good (which serves both processes); a handshake under way is
// waited for first (the upgrade timeout and a second at most; 100 ms if the
// call may not wait), and reset if it still runs; an upgraded connection
// cannot follow (its stream lives here, and moving it back to TCP is not
// built yet) and is reset, as across exec, so that the receiver never reads
// an empty socket or qpsock's bytes. The reset stands even if the send then
// fails.
void connections_before_passing(int carrier_fd, const msghdr& message, int flags);
// In a forked child, first thing: the connections the parent had upgraded
// stay the parent's (Connection::abandon_inherited_stream); the child's calls
// on them fail, and its close or exec leaves them to the parent.
void connections_after_fork_in_child();
// The process is ending without closing its sockets (exit, or _exit, then
// perhaps in a signal handler): every stream of its own delivers what send
// took before the process's end takes the transport down
// (Stream::deliver_before_exit), all within two seconds. A dead process's
// kernel sends its TCP socket buffers the same way.
void connections_before_exit(stream::Stream::ExitCall call);
// fd's connection has statistics row `handle` (a no-op for a socket with no Connection).
void attach_statistics(int fd, stats::Handle handle);

}  // namespace qpsock::upgrade
