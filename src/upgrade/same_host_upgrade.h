// The upgrade on one host, over shared memory (docs/upgrade-protocol.md,
// "Handshake"). The client's AF_UNIX listener, named after its socket's
// inode, is opened half of shm_upgrade_delay after its connect (before its
// SYN when the delay is short); the server, in the process that first does
// I/O on the connection, connects to it shm_upgrade_delay later from the
// upgrade worker (socket_upgrade.cc finds the client on this host there),
// while the application goes on over TCP, and runs the side-channel
// handshake there. A connection closed sooner costs neither end a listener,
// a handshake, a ring or a wakeup.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "upgrade/connection.h"
#include "upgrade/side_channel.h"
#include "upgrade/upgrade_agent.h"

namespace qpsock::upgrade {

// shm_upgrade_delay and shm_upgrade_bytes, as the configuration gives them.
std::chrono::steady_clock::duration shm_upgrade_delay();
uint64_t shm_upgrade_bytes();

// Client: opens the side-channel listener of the socket `tcp_socket_inode`
// into `listeners` (in connect() before the SYN with a short
// shm_upgrade_delay, else in the agent once it is due). 0, or -errno with
// `reason` (a string literal, for qpsock-stat); logs nothing.
int open_same_host_listener(uint64_t tcp_socket_inode, ClientListeners& listeners,
                            const char*& reason);

// Server, at the connection's first I/O in this process with
// shm_upgrade_delay 0, its client's socket being `client_inode` on this
// host: the attempt, now, in the application's thread.
void attempt_same_host_upgrade_now(int tcp_fd, Connection& connection, uint64_t client_inode,
                                   Deadline deadline);

// Server, in the upgrade worker once shm_upgrade_delay is over: the attempt
// for the socket `tcp_socket_inode`, found at `tcp` (kept, checked), unless
// the process forked meanwhile. Declines the connection if it fails, with
// one log line.
void attempt_same_host_upgrade_in_worker(Connection& connection, KeptFd tcp,
                                         uint64_t tcp_socket_inode, uint64_t client_inode,
                                         Deadline deadline);

// Server, in the upgrade worker before shm_upgrade_delay is over, once the
// connection moved shm_upgrade_bytes over TCP: the same attempt if the
// client's listener is there already; otherwise nothing happens (no line,
// no decline) and the connection stays offered.
void attempt_same_host_upgrade_early(Connection& connection, KeptFd tcp, uint64_t tcp_socket_inode,
                                     uint64_t client_inode, Deadline deadline);

}  // namespace qpsock::upgrade
