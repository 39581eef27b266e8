// The first part of a link's pool (link_pool.h): what the two processes of
// a link tell each other outside any channel.
//   mailbox  messages from the peer to the owner (link_mailbox.h): a ring
//            the peer writes, one message at a time, and the owner's
//            background loop reads when its doorbell rings
//   offers   the owner's client sockets that a server may upgrade over the
//            link (link_offers.h): hints only, the owner checks every
//            request against its own list
// Native-endian and fixed-size, like every shared structure on one host.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace qpsock::transport::shm {

inline constexpr uint64_t kPoolMagic = 0x316c6f6f'70737071;  // "qpspool1"
inline constexpr uint32_t kPoolVersion = 1;
inline constexpr uint32_t kMailboxSlots = 4096;
inline constexpr uint32_t kOfferSlots = 16384;

// One end's half of a channel: where its arena lies in its pool, and what
// the peer's stream needs to write to it.
struct ChannelFacts {
  uint64_t arena_offset;
  uint64_t arena_size;
  uint64_t probe_address;  // the arena's probe word, in the sender's memory
  uint64_t ring_address;   // stream::StreamEndpoint's fields
  uint64_t ring_size;
  uint32_t ring_key;
  uint32_t notification_capacity;
  uint32_t wake_slot;  // the channel's slot on the sender's doorbell
  uint32_t reserved;
};

enum class LinkMessageKind : uint32_t { channel_open = 1, channel_answer = 2 };

struct LinkMessage {
  uint32_t kind;            // LinkMessageKind
  int32_t status;           // an answer's: 0, or the -errno the channel was refused with
  uint64_t request;         // the opener's number for the exchange
  uint64_t socket_inode;    // the offered socket (the client's end)
  int32_t pid;              // the sender as it sees itself (for logs)
  uint32_t reserved;
  ChannelFacts facts;       // the sender's half (an open's, an accepting answer's)
  uint8_t padding[128 - 32 - sizeof(ChannelFacts)];
};
static_assert(sizeof(LinkMessage) == 128);

struct PoolHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  alignas(64) std::atomic<uint64_t> mailbox_tail;  // messages the peer wrote
  alignas(64) std::atomic<uint64_t> mailbox_head;  // messages the owner took
  alignas(64) LinkMessage mailbox[kMailboxSlots];
  // Socket inodes; 0: empty, kOfferRemoved: an offer that ended.
  std::atomic<uint64_t> offers[kOfferSlots];
};
inline constexpr uint64_t kOfferRemoved = ~uint64_t{0};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// Where the first arena may lie: past the header, on a 64 KiB boundary.
inline constexpr uint64_t kPoolArenaAlignment = uint64_t{64} << 10;
inline constexpr uint64_t kPoolHeaderSize =
    (sizeof(PoolHeader) + kPoolArenaAlignment - 1) / kPoolArenaAlignment * kPoolArenaAlignment;

}  // namespace qpsock::transport::shm
