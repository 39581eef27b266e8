// Which kernel socket a TCP connection is, and which process holds it: how the
// two ends of a side channel prove that they are the two ends of the TCP
// connection (docs/upgrade-protocol.md, "Handshake").
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>

namespace qpsock::upgrade {

// The inode of the TCP socket in this network namespace whose own address is
// `local` and whose peer is `remote` (NETLINK_SOCK_DIAG, one exact lookup).
// 0 or -errno (-ENOENT: no such socket here, e.g. the peer is on another host).
int find_tcp_socket_inode(const sockaddr_storage& local, const sockaddr_storage& remote,
                          uint64_t& inode);

// The inode of the socket behind our own fd.
int socket_inode_of_fd(int fd, uint64_t& inode);

// Whether process `pid` has socket `inode` open (one of /proc/PID/fd/* is
// "socket:[inode]"). False when we may not look (another user's process).
bool process_holds_socket(pid_t pid, uint64_t inode);

}  // namespace qpsock::upgrade
