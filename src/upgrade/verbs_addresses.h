// Where the two ends of an RDMA upgrade meet. The client's rdma_cm listener
// sits at the client's own TCP endpoint (its source address and port), which
// the server knows as its connection's peer address: nothing has to travel
// to tell it. rdma_cm ports on RoCE and IB are a space of their own, so the
// TCP socket and the listener never collide (on iWARP they are TCP ports,
// and the listener's bind fails: such connections stay on TCP).
//
// IPv4-mapped IPv6 addresses (an AF_INET6 socket talking IPv4) come out as
// plain IPv4, which is what rdma_cm resolves.
#pragma once

#include <sys/socket.h>

namespace qpsock::upgrade {

// Whether `address` is one of this host's own (a peer there is on this
// host). Asked of the kernel by binding a datagram socket to it, which
// succeeds only for a local address; the answer is kept for a second.
bool is_local_address(const sockaddr* address, socklen_t length);

// A client, just before its connect() to `destination`: the address its
// listener takes. The source port must be known before the SYN goes out, but
// the kernel picks it inside connect(): a socket without a port is therefore
// bound first, to port 0 (the kernel picks the port, as for any bind): an
// unbound one to the wildcard address (the source address is still chosen at
// connect), one bound with IP_BIND_ADDRESS_NO_PORT to its own address again,
// with the option off for that bind. The source address is the socket's own
// if it is bound to one, else the one the route to `destination` gives. 0,
// or -errno (no port to be had: the connection stays on TCP).
int client_meeting_address(int tcp_fd, const sockaddr* destination, socklen_t length,
                           sockaddr_storage& meeting);

// A client whose connect has bound its socket: the address its listener
// takes, the socket's own (as the server sees it as its peer). 0 or -errno.
int connected_meeting_address(int tcp_fd, sockaddr_storage& meeting);

// A server: where to connect from (its TCP address, any port, so that the
// connection takes the TCP connection's device) and to (the client's
// meeting address: the connection's peer address). 0 or -errno.
int server_meeting_addresses(int tcp_fd, sockaddr_storage& local, sockaddr_storage& peer);

// Whether the rdma_cm peer `cm_peer` has the same IP address (ports aside)
// as `tcp_peer`, the TCP connection's peer (getpeername): a client takes a
// connect request only from the host it is connected to.
bool is_tcp_peer_address(const sockaddr_storage& tcp_peer, const sockaddr* cm_peer);

}  // namespace qpsock::upgrade
