#include "transport/shm/link_channels.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "common/errno_guard.h"
#include "common/log.h"
#include "transport/shm/link_mailbox.h"
#include "transport/shm/link_offers.h"

namespace qpsock::transport::shm {
namespace {

std::atomic<ChannelRequestHandler> request_handler{nullptr};
std::atomic<ChannelAnswerHandler> answer_handler{nullptr};
std::atomic<LinkUpHandler> link_up_handler{nullptr};

// Writes `message` into the peer's mailbox and rings its doorbell.
int post_and_ring(PeerProcess& link, const LinkMessage& message) {
  const PeerProcess::PeerLink peer = link.peer_link();
  if (peer.pool == nullptr || peer.doorbell == nullptr) return -ENOTCONN;
  if (int error = post_link_message(*peer.pool, message); error < 0) return error;
  ring_link_doorbell(peer.doorbell->target());
  return 0;
}

}  // namespace

void set_channel_request_handler(ChannelRequestHandler handler) { request_handler.store(handler); }
void set_channel_answer_handler(ChannelAnswerHandler handler) { answer_handler.store(handler); }
void set_link_up_handler(LinkUpHandler handler) { link_up_handler.store(handler); }

size_t offer_on_links(uint64_t inode) {
  size_t published = 0;
  visit_links([&](const std::shared_ptr<PeerProcess>& link) {
    if (publish_offer(link->own_pool()->header(), inode)) ++published;
    return true;
  });
  return published;
}

void withdraw_from_links(uint64_t inode) {
  visit_links([&](const std::shared_ptr<PeerProcess>& link) {
    withdraw_offer(link->own_pool()->header(), inode);
    return true;
  });
}

std::shared_ptr<PeerProcess> link_offering(uint64_t inode) {
  std::shared_ptr<PeerProcess> found;
  visit_links([&](const std::shared_ptr<PeerProcess>& link) {
    const std::shared_ptr<PeerPool> pool = link->peer_link().pool;
    if (pool == nullptr || !offers(pool->header(), inode)) return true;
    found = link;
    return false;
  });
  return found;
}

int request_channel(PeerProcess& link, uint64_t request, uint64_t inode, const ChannelFacts& ours) {
  LinkMessage message{};
  message.kind = static_cast<uint32_t>(LinkMessageKind::channel_open);
  message.request = request;
  message.socket_inode = inode;
  message.pid = ::getpid();
  message.facts = ours;
  return post_and_ring(link, message);
}

int answer_channel(PeerProcess& link, const ChannelRequest& request, int status,
                   const ChannelFacts& ours) {
  LinkMessage message{};
  message.kind = static_cast<uint32_t>(LinkMessageKind::channel_answer);
  message.status = status;
  message.request = request.request;
  message.socket_inode = request.socket_inode;
  message.pid = ::getpid();
  if (status == 0) message.facts = ours;
  return post_and_ring(link, message);
}

void on_link_message(const std::shared_ptr<PeerProcess>& link, const LinkMessage& message) {
  switch (static_cast<LinkMessageKind>(message.kind)) {
    case LinkMessageKind::channel_open: {
      const ChannelRequestHandler handler = request_handler.load();
      const ChannelRequest request{message.request, message.socket_inode, message.pid, message.facts};
      if (handler != nullptr) {
        handler(link, request);
      } else {
        ErrnoGuard errno_guard;
        (void)answer_channel(*link, request, -ECONNREFUSED, {});
      }
      return;
    }
    case LinkMessageKind::channel_answer: {
      const int status = message.status <= 0 && message.status > -4096 ? message.status : -EPROTO;
      const ChannelAnswer answer{message.request, message.socket_inode, status, message.facts};
      if (const ChannelAnswerHandler handler = answer_handler.load(); handler != nullptr)
        handler(link, answer);
      return;
    }
  }
  ErrnoGuard errno_guard;
  QPSOCK_LOG(debug, "shm link with pid %d: a message of unknown kind %u", link->pid(), message.kind);
}

void link_adopted() {
  if (const LinkUpHandler handler = link_up_handler.load(); handler != nullptr) handler();
}

}  // namespace qpsock::transport::shm
