// Channels set up over a link that exists already: no side channel, memfd,
// descriptor or handshake of their own. The first connection between two
// processes makes the link (its shm hellos carry each side's pool and
// doorbell: shm_transport.h); after it, a client offers its sockets on its
// links (link_offers.h), and a server that finds its peer socket offered
// asks for a channel in the client's mailbox (channel_open, with its half:
// ChannelFacts); the client's loop hands the request to the upgrade layer,
// which answers in the server's mailbox (channel_answer, with its half or a
// refusal). Each then has the other's arena and ring, and the upgrade layer
// proves the TCP connection in band (the Hello and binding token, as over
// RDMA: docs/upgrade-protocol.md).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>

#include "transport/shm/peer_process.h"
#include "transport/shm/pool_header.h"

namespace qpsock::transport::shm {

// What a server asked for, as the client's loop took it.
struct ChannelRequest {
  uint64_t request;
  uint64_t socket_inode;  // the client's socket it names
  pid_t pid;
  ChannelFacts facts;     // the server's half
};
// What the client answered, as the server's loop took it.
struct ChannelAnswer {
  uint64_t request;
  uint64_t socket_inode;
  int status;          // 0, or the -errno the client refused with
  ChannelFacts facts;  // the client's half, when status is 0
};

// Called on the background loop's thread for each request a link's peer
// makes: it must not wait long (hand slow work to another thread) and
// answers with answer_channel, exactly once, unless the link is gone.
using ChannelRequestHandler = void (*)(std::shared_ptr<PeerProcess> link, const ChannelRequest& request);
void set_channel_request_handler(ChannelRequestHandler handler);
// Called on the background loop's thread for each answer to our requests.
using ChannelAnswerHandler = void (*)(std::shared_ptr<PeerProcess> link, const ChannelAnswer& answer);
void set_channel_answer_handler(ChannelAnswerHandler handler);
// Called (on the thread that made it) each time a link with a new peer
// process comes up: offers made before it may be published on it.
using LinkUpHandler = void (*)();
void set_link_up_handler(LinkUpHandler handler);

// Publishes `inode` on every live link: how many took it.
size_t offer_on_links(uint64_t inode);
void withdraw_from_links(uint64_t inode);
// The live link whose peer offers `inode`, or null.
std::shared_ptr<PeerProcess> link_offering(uint64_t inode);

// The server's side: asks the peer of `link` for a channel to the socket
// `inode`, with our half `ours`, under the caller's number `request` (the
// answer handler hears of it). 0, or -errno: -EAGAIN (its mailbox is
// full), -ENOTCONN (no link to it yet).
int request_channel(PeerProcess& link, uint64_t request, uint64_t inode, const ChannelFacts& ours);
// The client's answer to `request`: `status` 0 with our half `ours`, or the
// -errno it is refused with. 0, or -errno if it could not be sent.
int answer_channel(PeerProcess& link, const ChannelRequest& request, int status,
                   const ChannelFacts& ours);

// peer_process.cc's calls: a message from `link`'s peer, on the loop's
// thread; a peer link adopted.
void on_link_message(const std::shared_ptr<PeerProcess>& link, const LinkMessage& message);
void link_adopted();

}  // namespace qpsock::transport::shm
