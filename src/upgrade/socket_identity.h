// Which kernel socket a TCP connection is, and which process holds it: how the
// two ends of a side channel prove that they are the two ends of the TCP
// connection (docs/upgrade-protocol.md, "Handshake").
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>

#include "common/kept_fd.h"
#include "stream/function_ref.h"

namespace qpsock::upgrade {

class Connection;

// The inode of the TCP socket in this network namespace whose own address is
// `local` and whose peer is `remote` (NETLINK_SOCK_DIAG, one exact lookup).
// 0 or -errno (-ENOENT: no such socket here, e.g. the peer is on another host;
// -EPIPE: it is here, but no process holds it: it was closed).
int find_tcp_socket_inode(const sockaddr_storage& local, const sockaddr_storage& remote,
                          uint64_t& inode);

// The inode of the socket behind our own fd.
int socket_inode_of_fd(int fd, uint64_t& inode);

// The same, read while `connection` is at `fd` before and after the read: a
// close takes a connection off its number before the kernel frees the
// number, so a connection still there means the read was of its socket.
// 0, -ENOTCONN (the connection is not at fd), or -errno.
int connection_socket_inode(int fd, const Connection& connection, uint64_t& inode);

// The fd through which this process now holds `connection`'s socket, whose
// inode is `socket_inode`, kept (common/kept_fd.h: kept first, then checked,
// so a close after the check ends the keep): `offered_fd` while it still is
// that, else another fd of the connection that is (a shell's `exec
// 3<>/dev/tcp/...` connects on one number, then dup2s it to 3 and closes
// the first). Empty if none is (the application closed it, and may have
// reused the number).
KeptFd kept_socket_fd(const Connection& connection, int offered_fd, uint64_t socket_inode);

// How often read_socket looks again when the socket moved under it.
inline constexpr int kSocketReadAttempts = 8;

// Runs `read` (0 or -errno) on the socket's current fd (kept_socket_fd,
// from `offered_fd`), under an FdUse, and trusts its result only if that fd
// still names the socket after it: the application may renumber the socket
// meanwhile (a shell's `printf ... >&3` dup2s it onto fd 1 for the builtin
// and then puts fd 1 back). `socket` is then the kept number read. What
// `read` returned, or -ENOTCONN when the socket is gone (or kept moving).
int read_socket(const Connection& connection, int offered_fd, uint64_t socket_inode,
                stream::FunctionRef<int(int fd)> read, KeptFd& socket);

// Whether process `pid` has socket `inode` open (one of /proc/PID/fd/* is
// "socket:[inode]"). False when we may not look (another user's process).
// `likely_fd` (if not negative) is looked at first: one readlink instead of
// the whole directory when the peer named its fd.
bool process_holds_socket(pid_t pid, uint64_t inode, int likely_fd = -1);

}  // namespace qpsock::upgrade
