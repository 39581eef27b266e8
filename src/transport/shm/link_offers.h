// A client's offers on a link (pool_header.h): the inodes of its sockets
// that a server process on the other end may upgrade over the link, written
// into its own pool, where the server looks them up by the inode SOCK_DIAG
// gave it for its peer socket. Open addressing over kOfferSlots words, a
// short probe each way. Only hints: a server that names an inode the client
// no longer offers is refused by the client's own list.
#pragma once

#include <cstdint>

#include "transport/shm/pool_header.h"

namespace qpsock::transport::shm {

// Enters `inode` (not 0); false if its probe found no room.
bool publish_offer(PoolHeader& own, uint64_t inode);
void withdraw_offer(PoolHeader& own, uint64_t inode);
// Whether the peer's header offers `inode`.
bool offers(const PoolHeader& peer, uint64_t inode);

}  // namespace qpsock::transport::shm
