// The memory one process gives its channels with one peer process: the
// link's *pool*, one memfd (sealed against shrinking; only its owner grows
// it) instead of a memfd per connection. The owner maps it chunk by chunk as
// it grows; the peer maps a chunk the first time an arena in it is named. So
// a channel costs no memfd, mmap or munmap of its own (unmapping each
// connection's arenas took a quarter of a 10,000-connection run in TLB
// shootdowns). The pool begins with its PoolHeader (pool_header.h: the
// link's mailbox and offers); the rest holds arenas (arena_layout.h), carved
// by power-of-two size class.
//
// An arena whose channel ended here is reused only once the peer has let go
// of it as well (it sets the arena's released flag, arena_layout.h): until
// then the peer may still write into it. A peer that never mapped it (its
// setup failed first) never lets go, and the arena waits for the link's end.
// Arenas given back keep their pages until trim() (the link's background
// sweep, once a second): beyond a few warm ones kept for the next channels,
// their pages go back to the kernel, punched out of the memfd in as few
// calls as adjacent arenas allow (each punch costs a TLB shootdown in both
// processes).
//
// Thread-safe. A forked child must not use the parent's pools (the link is
// the parent's: peer_process.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "common/unique_fd.h"
#include "transport/shm/pool_header.h"

namespace qpsock::transport::shm {

// The unit in which a pool grows and is mapped.
inline constexpr uint64_t kPoolChunk = uint64_t{64} << 20;
// The largest a pool may grow: a peer can make us map no more than this of its own.
inline constexpr uint64_t kLargestPool = uint64_t{256} << 30;

// The chunks of one pool's memfd as this process maps them.
class PoolChunks {
 public:
  PoolChunks() = default;
  ~PoolChunks();
  PoolChunks(const PoolChunks&) = delete;
  PoolChunks& operator=(const PoolChunks&) = delete;

  // Maps `count` chunks of `fd` from chunk `first` as one mapping, unless
  // each is mapped already; 0 or -errno.
  int map(int fd, uint64_t first, uint64_t count);
  // The address of [offset, offset + length) if it lies within one mapping, else null.
  std::byte* find(uint64_t offset, uint64_t length) const;

 private:
  struct Chunk {
    std::byte* address = nullptr;  // of the chunk, in its mapping
    uint64_t mapping_end = 0;      // the first chunk past its mapping
  };
  struct Mapping {
    std::byte* address;
    size_t length;
  };
  std::vector<Chunk> chunks_;
  std::vector<Mapping> mappings_;
};

// The size class an arena of `size` bytes takes (0 if too large).
uint64_t pool_size_class(uint64_t size);

class OwnPool {
 public:
  OwnPool() = default;
  OwnPool(const OwnPool&) = delete;
  OwnPool& operator=(const OwnPool&) = delete;

  // Creates the memfd, maps its first chunk and writes its header; 0 or -errno.
  int create();
  int fd() const { return memfd_.get(); }
  PoolHeader& header() const { return *header_; }

  // Room for an arena of `size` bytes: its offset and address, and whether
  // it was another channel's (then it holds what that one left, in its
  // first part and perhaps its ring; else it is zeroed), or -errno
  // (-ENOSPC: the pool is at kLargestPool). Of a reused one, the
  // registration slots its last channel published (what give_back was told).
  int take(uint64_t size, uint64_t& offset, std::byte*& address, bool& reused,
           uint32_t& registration_slots_used);
  // The arena's channel ended here (what the arena's ring holds is dead),
  // having published `registration_slots_used` slots of its table: reused
  // once the peer lets go of it.
  void give_back(uint64_t offset, uint64_t size, uint64_t ring_offset,
                 uint32_t registration_slots_used);
  // Returns the pages of arenas given back, but for kWarmPoolBytes of them.
  void trim();
  // Bytes of arenas given back whose pages are still ours.
  uint64_t warm_bytes();

 private:
  struct Arena {
    uint64_t offset;
    uint64_t size_class;
    uint64_t ring_offset;
    uint32_t registration_slots_used;
    bool punched;  // every page returned (free arenas) or the ring's (waiting ones)
  };
  // Arenas the peer has let go of since they were given back, made free.
  void collect_released_locked(size_t most);
  int grow_locked(uint64_t chunks);
  void punch_locked(uint64_t offset, uint64_t length);

  std::mutex mutex_;
  UniqueFd memfd_;
  PoolHeader* header_ = nullptr;
  PoolChunks chunks_;
  uint64_t file_size_ = 0;
  uint64_t bump_ = 0;  // the next unused offset (never past file_size_)
  std::vector<Arena> free_;     // reusable now
  std::vector<Arena> waiting_;  // given back; the peer may still hold them
};

// What a pool keeps of the arenas given back, for the channels that follow.
inline constexpr uint64_t kWarmPoolBytes = uint64_t{8} << 20;

class PeerPool {
 public:
  PeerPool() = default;
  PeerPool(const PeerPool&) = delete;
  PeerPool& operator=(const PeerPool&) = delete;

  // Takes the peer's pool memfd: sealed against shrinking, with a header of
  // ours; 0 or -errno (-EPROTO: not a pool).
  int attach(UniqueFd fd);
  PoolHeader& header() const { return *header_; }
  // The peer's arena [offset, offset + size), mapped here; null if the peer
  // named memory outside its file or its classes. Never past the file's
  // end (the file cannot shrink), so touching it raises no SIGBUS.
  std::byte* arena(uint64_t offset, uint64_t size);
  // Held by whoever writes into the peer's mailbox (link_mailbox.h).
  std::mutex& sender_mutex() { return sender_mutex_; }

 private:
  std::mutex mutex_;
  std::mutex sender_mutex_;
  UniqueFd memfd_;
  PoolHeader* header_ = nullptr;
  PoolChunks chunks_;
  uint64_t file_size_seen_ = 0;
};

}  // namespace qpsock::transport::shm
