// The messages of a link (pool_header.h): each process writes into the
// mailbox in its peer's pool, one writer at a time (a lock of its own
// PeerPool), and rings the peer's doorbell; the peer's background loop takes
// them. A message is copied out of shared memory before it is looked at, so
// the peer cannot change it under our checks. A mailbox holds
// kMailboxSlots: a peer whose loop does not take them soon enough has the
// next channel refused.
#pragma once

#include <cstddef>

#include "stream/function_ref.h"
#include "transport/shm/link_pool.h"
#include "transport/shm/pool_header.h"

namespace qpsock::transport::shm {

// Writes `message` into the peer's mailbox (the caller rings its doorbell);
// 0, or -EAGAIN when the mailbox is full.
int post_link_message(PeerPool& peer, const LinkMessage& message);

// Calls `taken` with a copy of each message the peer wrote since the last
// call, on the owner's loop (one consumer); how many. A peer whose tail
// claims more than the mailbox holds has its messages dropped.
size_t take_link_messages(OwnPool& own, stream::FunctionRef<void(const LinkMessage&)> taken);

}  // namespace qpsock::transport::shm
