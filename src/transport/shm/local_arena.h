// Our arena (arena_layout.h): a memfd sealed against shrinking and growing,
// sent to the peer at setup. We map its control and inbox parts for the
// transport's lifetime; the receive ring part is mapped once, into the
// stream's ring (map_ring), after which the memfd itself is closed: the
// mappings, ours and the peer's, keep the memory alive, and it is gone once
// both processes unmapped it (or died). Nothing is ever named in /dev/shm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/unique_fd.h"
#include "stream/mapped_memory.h"
#include "transport/shm/arena_layout.h"

namespace qpsock::transport::shm {

class LocalArena {
 public:
  // Creates, sizes, seals and maps the arena, and fills in its control block
  // (layout and a random probe word); 0 or -errno.
  static int create(const ArenaLayout& layout, std::unique_ptr<LocalArena>& arena);

  int fd() const { return memfd_.get(); }
  const ArenaLayout& layout() const { return layout_; }
  ControlBlock& control() const { return *reinterpret_cast<ControlBlock*>(shared_.data()); }
  RegistrationEntry* registrations() const {
    return reinterpret_cast<RegistrationEntry*>(shared_.data() + kRegistrationTableOffset);
  }
  InboxHeader& inbox() const {
    return *reinterpret_cast<InboxHeader*>(shared_.data() + layout_.inbox_offset);
  }
  const std::atomic<uint32_t>* inbox_slots() const {
    return reinterpret_cast<const std::atomic<uint32_t>*>(shared_.data() + layout_.inbox_offset +
                                                          kInboxSlotsOffset);
  }

  // Maps the first `length` bytes of the ring part into `ring` (once, before
  // any registration of it), then closes the memfd; 0 or -errno.
  int map_ring(size_t length, stream::MappedMemory& ring);
  // The arena offset of [address, address + length) if it lies in the ring
  // mapped by map_ring, else kNotInArena.
  uint64_t ring_offset_of(const void* address, size_t length) const;

 private:
  UniqueFd memfd_;
  ArenaLayout layout_{};
  stream::MappedMemory shared_;  // control and inbox parts
  const std::byte* ring_address_ = nullptr;
  size_t ring_length_ = 0;
};

}  // namespace qpsock::transport::shm
