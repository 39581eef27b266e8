// The peer's arena (arena_layout.h) as we see it: a part of the peer's pool
// (link_pool.h), which we map chunk by chunk. We read its control block and
// registration table and write its inbox and ring. The layout is copied out
// once checked (our magic and version, the size the peer announced), so the
// peer cannot move the bounds we check its registrations against. When we
// let go of it (only in the process that mapped it: a forked child's copy
// writes nothing), we set its released flag: the peer may reuse it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "transport/shm/arena_layout.h"
#include "transport/shm/link_pool.h"
#include "transport/shm/process_page.h"

namespace qpsock::transport::shm {

class PeerArena {
 public:
  // The arena of `size` bytes at `offset` in `pool`; 0 or -errno (-EPROTO:
  // not a usable arena).
  static int map(std::shared_ptr<PeerPool> pool, uint64_t offset, uint64_t size,
                 const ProcessPage* page, uint64_t epoch, std::unique_ptr<PeerArena>& arena);
  PeerArena() = default;
  ~PeerArena();
  PeerArena(const PeerArena&) = delete;
  PeerArena& operator=(const PeerArena&) = delete;

  const ArenaLayout& layout() const { return layout_; }
  const ControlBlock& control() const { return *reinterpret_cast<const ControlBlock*>(base_); }
  const RegistrationEntry* registrations() const {
    return reinterpret_cast<const RegistrationEntry*>(base_ + kRegistrationTableOffset);
  }
  InboxHeader& inbox() const { return *reinterpret_cast<InboxHeader*>(base_ + layout_.inbox_offset); }
  std::atomic<uint32_t>* inbox_slots() const {
    return reinterpret_cast<std::atomic<uint32_t>*>(base_ + layout_.inbox_offset + kInboxSlotsOffset);
  }
  // Whether [arena_offset, arena_offset + length) lies in the ring part.
  bool ring_contains(uint64_t arena_offset, uint64_t length) const {
    return arena_offset >= layout_.ring_offset && length <= layout_.ring_capacity &&
           arena_offset - layout_.ring_offset <= layout_.ring_capacity - length;
  }
  // The byte at `arena_offset` of the inbox or ring part.
  std::byte* at(uint64_t arena_offset) const { return base_ + arena_offset; }

 private:
  std::shared_ptr<PeerPool> pool_;
  const ProcessPage* page_ = nullptr;
  uint64_t epoch_ = 0;
  ArenaLayout layout_{};
  std::byte* base_ = nullptr;
};

}  // namespace qpsock::transport::shm
