#include "transport/shm/local_arena.h"

#include <cerrno>
#include <cstring>
#include <new>

#include "common/random_word.h"

namespace qpsock::transport::shm {

int LocalArena::create(std::shared_ptr<OwnPool> pool, const ArenaLayout& layout,
                       const ProcessPage* page, uint64_t epoch, std::unique_ptr<LocalArena>& arena) {
  auto made = std::make_unique<LocalArena>();
  std::byte* base = nullptr;
  bool reused = false;
  uint32_t registrations_left = 0;
  if (int error = pool->take(layout.size, made->offset_, base, reused, registrations_left); error < 0)
    return error;
  made->pool_ = std::move(pool);
  made->page_ = page;
  made->epoch_ = epoch;
  made->layout_ = layout;
  made->base_ = base;
  // A reused arena holds its last channel's control, registrations and
  // inbox. The control block and inbox header are made anew below; of the
  // table, the slots the last channel published are cleared (a fresh arena
  // is zero, and its pages are touched only as they are used); the inbox's
  // slots are read only below its tail, which starts from zero.
  if (reused)
    std::memset(static_cast<void*>(base + kRegistrationTableOffset), 0,
                size_t{registrations_left} * sizeof(RegistrationEntry));
  auto* control = new (base) ControlBlock{};
  control->magic = kArenaMagic;
  control->version = kLayoutVersion;
  control->layout = layout;
  control->probe_word = random_word();
  new (base + layout.inbox_offset) InboxHeader{};
  arena = std::move(made);
  return 0;
}

LocalArena::~LocalArena() {
  if (base_ != nullptr && in_epoch(page_, epoch_))
    pool_->give_back(offset_, layout_.size, layout_.ring_offset, registration_slots_used_);
}

int LocalArena::map_ring(size_t length, stream::MappedMemory& ring) {
  if (ring_address_ != nullptr) return -EBUSY;
  if (length == 0 || length > layout_.ring_capacity) return -EINVAL;
  ring.borrow(base_ + layout_.ring_offset, length);
  ring_address_ = ring.data();
  ring_length_ = length;
  return 0;
}

uint64_t LocalArena::ring_offset_of(const void* address, size_t length) const {
  const auto begin = reinterpret_cast<uintptr_t>(address);
  const auto ring = reinterpret_cast<uintptr_t>(ring_address_);
  if (ring_address_ == nullptr || begin < ring || length > ring_length_ ||
      begin - ring > ring_length_ - length)
    return kNotInArena;
  return layout_.ring_offset + (begin - ring);
}

}  // namespace qpsock::transport::shm
