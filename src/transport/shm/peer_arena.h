// The peer's arena (arena_layout.h) as mapped here: its control part
// read-only (we only read its control block and registration table), its
// inbox and ring read-write (we push immediates and write records). The
// memfd is checked before anything is trusted: sealed against shrinking (so
// touching it can never raise SIGBUS), the size its layout claims, our magic
// and version. The layout is copied out once checked, so the peer cannot
// move the bounds we check its registrations against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "stream/mapped_memory.h"
#include "transport/shm/arena_layout.h"

namespace qpsock::transport::shm {

class PeerArena {
 public:
  // Maps the peer's memfd `fd` (which the caller still owns and may close
  // afterwards); 0 or -errno (-EPROTO: not a usable arena).
  static int map(int fd, std::unique_ptr<PeerArena>& arena);

  const ArenaLayout& layout() const { return layout_; }
  const ControlBlock& control() const {
    return *reinterpret_cast<const ControlBlock*>(control_.data());
  }
  const RegistrationEntry* registrations() const {
    return reinterpret_cast<const RegistrationEntry*>(control_.data() + kRegistrationTableOffset);
  }
  InboxHeader& inbox() const { return *reinterpret_cast<InboxHeader*>(writable_.data()); }
  std::atomic<uint32_t>* inbox_slots() const {
    return reinterpret_cast<std::atomic<uint32_t>*>(writable_.data() + kInboxSlotsOffset);
  }
  // Whether [arena_offset, arena_offset + length) lies in the ring part.
  bool ring_contains(uint64_t arena_offset, uint64_t length) const {
    return arena_offset >= layout_.ring_offset && length <= layout_.ring_capacity &&
           arena_offset - layout_.ring_offset <= layout_.ring_capacity - length;
  }
  // The byte at `arena_offset` of the inbox or ring part.
  std::byte* at(uint64_t arena_offset) const {
    return writable_.data() + (arena_offset - layout_.inbox_offset);
  }

 private:
  ArenaLayout layout_{};
  stream::MappedMemory control_;   // read-only
  stream::MappedMemory writable_;  // inbox and ring
};

}  // namespace qpsock::transport::shm
