// Our arena (arena_layout.h): a part of our pool with the peer process
// (link_pool.h), which the peer maps too. Its control and inbox parts stay
// where the pool maps them; the receive ring part is lent once to the
// stream's ring (map_ring). When the last holder lets go, the arena goes
// back to the pool (only in the process that made it: a forked child's copy
// never touches the pool).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "stream/mapped_memory.h"
#include "transport/shm/arena_layout.h"
#include "transport/shm/link_pool.h"
#include "transport/shm/process_page.h"

namespace qpsock::transport::shm {

class LocalArena {
 public:
  // Takes the arena from `pool` and fills in its control block (layout and a
  // random probe word); 0 or -errno. `page` and `epoch` tell the process that
  // may give it back.
  static int create(std::shared_ptr<OwnPool> pool, const ArenaLayout& layout,
                    const ProcessPage* page, uint64_t epoch, std::unique_ptr<LocalArena>& arena);
  LocalArena() = default;
  ~LocalArena();
  LocalArena(const LocalArena&) = delete;
  LocalArena& operator=(const LocalArena&) = delete;

  // Where it lies in the pool (told to the peer).
  uint64_t pool_offset() const { return offset_; }
  const ArenaLayout& layout() const { return layout_; }
  ControlBlock& control() const { return *reinterpret_cast<ControlBlock*>(base_); }
  RegistrationEntry* registrations() const {
    return reinterpret_cast<RegistrationEntry*>(base_ + kRegistrationTableOffset);
  }
  InboxHeader& inbox() const { return *reinterpret_cast<InboxHeader*>(base_ + layout_.inbox_offset); }
  const std::atomic<uint32_t>* inbox_slots() const {
    return reinterpret_cast<const std::atomic<uint32_t>*>(base_ + layout_.inbox_offset +
                                                          kInboxSlotsOffset);
  }

  // The registration table's slots below the highest one published (by the
  // publisher, under its lock): what a later channel in this arena must
  // clear, and all the table that was ever touched.
  void note_registration_slot(uint32_t slot) {
    if (slot >= registration_slots_used_) registration_slots_used_ = slot + 1;
  }
  uint32_t registration_slots_used() const { return registration_slots_used_; }
  // Lends the first `length` bytes of the ring part to `ring` (once, before
  // any registration of it); 0 or -errno.
  int map_ring(size_t length, stream::MappedMemory& ring);
  // The arena offset of [address, address + length) if it lies in the ring
  // lent by map_ring, else kNotInArena.
  uint64_t ring_offset_of(const void* address, size_t length) const;

 private:
  std::shared_ptr<OwnPool> pool_;
  const ProcessPage* page_ = nullptr;
  uint64_t epoch_ = 0;
  uint64_t offset_ = 0;
  ArenaLayout layout_{};
  std::byte* base_ = nullptr;
  const std::byte* ring_address_ = nullptr;
  size_t ring_length_ = 0;
  uint32_t registration_slots_used_ = 0;
};

}  // namespace qpsock::transport::shm
