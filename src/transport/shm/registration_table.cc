#include "transport/shm/registration_table.h"

#include <cerrno>

namespace qpsock::transport::shm {
namespace {

constexpr uint32_t kSlotBits = 8;
constexpr uint32_t kGenerationMask = (1u << (32 - kSlotBits)) - 1;
static_assert(kRegistrationSlots == 1u << kSlotBits);

uint32_t slot_of(uint32_t key) { return key & (kRegistrationSlots - 1); }

}  // namespace

RegistrationPublisher::RegistrationPublisher(std::shared_ptr<LocalArena> arena,
                                             const ProcessPage* page, uint64_t epoch)
    : arena_(std::move(arena)), page_(page), epoch_(epoch) {}

int64_t RegistrationPublisher::publish(const void* address, size_t length, PublishedAccess access,
                                       uint64_t arena_offset) {
  std::lock_guard lock(mutex_);
  // A forked child's table is its parent's (a shared mapping): hands off.
  if (closed_ || !in_epoch(page_, epoch_)) return -ECONNRESET;
  for (uint32_t slot = 0; slot < kRegistrationSlots; ++slot) {
    RegistrationEntry& published = entry(slot);
    if (published.key.load() != 0) continue;
    uint32_t generation = (generations_[slot] + 1) & kGenerationMask;
    if (generation == 0) generation = 1;
    generations_[slot] = generation;
    const uint32_t key = generation << kSlotBits | slot;
    // A seqlock's writer, all seq_cst (no fences: ThreadSanitizer does not
    // model them): a peer that read the old key and then these fields sees
    // the key change when it looks again.
    published.access.store(static_cast<uint32_t>(access));
    published.address.store(reinterpret_cast<uintptr_t>(address));
    published.length.store(length);
    published.arena_offset.store(arena_offset);
    published.key.store(key);
    arena_->note_registration_slot(slot);
    return key;
  }
  return -ENOSPC;
}

void RegistrationPublisher::revoke(uint32_t key) {
  std::lock_guard lock(mutex_);
  if (!in_epoch(page_, epoch_)) return;
  RegistrationEntry& published = entry(slot_of(key));
  uint32_t expected = key;
  published.key.compare_exchange_strong(expected, 0);
}

void RegistrationPublisher::revoke_all() {
  std::lock_guard lock(mutex_);
  if (!in_epoch(page_, epoch_)) return;
  closed_ = true;
  // Only the slots ever published: the rest of the table is zero, and a
  // channel that never registered leaves its pages untouched.
  const uint32_t used = arena_->registration_slots_used();
  for (uint32_t slot = 0; slot < used; ++slot) entry(slot).key.store(0);
}

int resolve_registration(const RegistrationEntry* table, stream::RemoteRegion region, size_t length,
                         PublishedAccess access, ResolvedRegion& resolved) {
  if (region.key == 0) return -EFAULT;
  const RegistrationEntry& published = table[slot_of(region.key)];
  // A seqlock's reader (seq_cst loads are plain loads on x86): the fields
  // belong to the key only if it is unchanged after them.
  if (published.key.load() != region.key) return -EFAULT;
  const uint32_t granted = published.access.load();
  const uint64_t begin = published.address.load();
  const uint64_t extent = published.length.load();
  const uint64_t arena_offset = published.arena_offset.load();
  if (published.key.load() != region.key) return -EFAULT;
  if (granted != static_cast<uint32_t>(access)) return -EFAULT;
  if (region.address < begin || length > extent || region.address - begin > extent - length)
    return -EFAULT;
  const uint64_t into = region.address - begin;
  resolved.arena_offset = arena_offset == kNotInArena ? kNotInArena : arena_offset + into;
  resolved.remote_address = region.address;
  return 0;
}

bool still_published(const RegistrationEntry* table, uint32_t key) {
  return table[slot_of(key)].key.load() == key;
}

}  // namespace qpsock::transport::shm
