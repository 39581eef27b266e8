#include "transport/shm/peer_arena.h"

#include <cerrno>

namespace qpsock::transport::shm {

int PeerArena::map(std::shared_ptr<PeerPool> pool, uint64_t offset, uint64_t size,
                   const ProcessPage* page, uint64_t epoch, std::unique_ptr<PeerArena>& arena) {
  if (size <= ArenaLayout::owner_part_size()) return -EPROTO;
  std::byte* base = pool->arena(offset, size);
  if (base == nullptr) return -EPROTO;
  const auto& control = *reinterpret_cast<const ControlBlock*>(base);
  const ArenaLayout layout = control.layout;
  if (control.magic != kArenaMagic || control.version != kLayoutVersion ||
      layout.inbox_offset != ArenaLayout::owner_part_size() || !layout.consistent_with(size))
    return -EPROTO;
  auto made = std::make_unique<PeerArena>();
  made->pool_ = std::move(pool);
  made->page_ = page;
  made->epoch_ = epoch;
  made->layout_ = layout;
  made->base_ = base;
  arena = std::move(made);
  return 0;
}

PeerArena::~PeerArena() {
  if (base_ != nullptr && in_epoch(page_, epoch_))
    arena_released_flag(base_).store(1, std::memory_order_release);
}

}  // namespace qpsock::transport::shm
