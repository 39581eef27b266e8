// The upgrade between hosts, over RDMA (docs/upgrade-protocol.md, "Between
// hosts: RDMA"). The client listens with rdma_cm at its own TCP endpoint
// before its SYN goes out (verbs_addresses.h); the server, in the process
// that first does I/O on the connection, connects there from the upgrade
// worker, while the application goes on over TCP. The rdma_cm private data
// carries each side's ring (transport/verbs/connection_hello.h); each side
// then installs its stream and sends its Hello, with its binding token, as
// the first bytes of its direction (Connection::install_announced). A peer
// that does not run qpsock has no listener: its kernel rejects the connect,
// and nothing is ever written into its TCP stream.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <memory>

#include "transport/verbs/verbs_listener.h"
#include "upgrade/connection.h"
#include "upgrade/side_channel.h"
#include "upgrade/upgrade_agent.h"

namespace qpsock::upgrade {

// Client, in connect() before the SYN, when rdma_upgrade_delay is below
// kShortestPlannedListenerDelay: where and how to listen with rdma_cm (the
// socket's own endpoint, bound now if need be; options sized for its
// stream). 0, or -errno with `reason` (a string literal, for qpsock-stat)
// saying why no upgrade can be offered; nothing is logged.
int prepare_verbs_offer(int tcp_fd, const sockaddr* destination, socklen_t length,
                        RdmaListenerPlan& plan, const char*& reason);

// Client, in the upgrade agent once a planned listener is due, its socket
// connected and at `tcp_fd` (read under its current number): the same, the
// endpoint read from the socket. The RDMA libraries load here, off the
// application's threads, for a connection that lived long enough.
int prepare_planned_verbs_offer(int tcp_fd, RdmaListenerPlan& plan, const char*& reason);

// Client, in connect() or later in the upgrade agent: the rdma_cm listener
// `plan` describes. 0, or -errno with `reason` as above; logs only at debug.
int open_verbs_listener(int tcp_fd, const RdmaListenerPlan& plan,
                        std::unique_ptr<transport::verbs::VerbsListener>& listener,
                        const char*& reason);

// Client, in the upgrade agent, once a connect request waits on `listener`:
// accepts it, checks that `tcp_fd` is still the socket `tcp_socket_inode`,
// and installs the stream. 0, or -errno (the caller declines). Logs one line
// either way.
int accept_verbs_upgrade(transport::verbs::VerbsListener& listener, Connection& connection,
                         int tcp_fd, uint64_t tcp_socket_inode, Deadline deadline);

// Server, at the connection's first I/O in this process (the application's
// own call on `tcp_fd`): reads the socket's addresses, then as
// queue_server_verbs_upgrade, rdma_upgrade_delay from now.
void begin_server_verbs_upgrade(int tcp_fd, const std::shared_ptr<Connection>& connection,
                                Deadline deadline);

// Server: the attempt for the socket `tcp_socket_inode` at `tcp_fd`, whose
// addresses are `local` and `peer`, is handed to the upgrade worker, to
// begin at `not_before`; the worker declines the connection if it fails.
// Declines it at once if no attempt can be made (no RDMA device, too low an
// RLIMIT_MEMLOCK, no worker); logs one line for that.
void queue_server_verbs_upgrade(int tcp_fd, uint64_t tcp_socket_inode, const sockaddr_storage& local,
                                const sockaddr_storage& peer,
                                const std::shared_ptr<Connection>& connection, Deadline deadline,
                                std::chrono::steady_clock::time_point not_before);

// rdma_upgrade_delay, as the configuration gives it.
std::chrono::steady_clock::duration rdma_upgrade_delay();

}  // namespace qpsock::upgrade
