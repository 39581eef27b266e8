#include "transport/shm/arena_layout.h"

#include <unistd.h>

#include <bit>

namespace qpsock::transport::shm {
namespace {

uint64_t page_rounded(uint64_t length) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return (length + page - 1) / page * page;
}

}  // namespace

uint64_t ArenaLayout::owner_part_size() {
  return page_rounded(kRegistrationTableOffset + kRegistrationSlots * sizeof(RegistrationEntry));
}

ArenaLayout ArenaLayout::make(uint32_t notification_capacity, uint64_t ring_capacity) {
  ArenaLayout layout{};
  layout.notification_capacity = notification_capacity;
  layout.inbox_slots = std::bit_ceil(notification_capacity);
  layout.inbox_offset = owner_part_size();
  layout.ring_offset =
      layout.inbox_offset + page_rounded(kInboxSlotsOffset + uint64_t{layout.inbox_slots} * 4);
  layout.ring_capacity = page_rounded(ring_capacity);
  layout.size = layout.ring_offset + layout.ring_capacity;
  return layout;
}

bool ArenaLayout::consistent_with(uint64_t arena_size) const {
  if (notification_capacity == 0 || notification_capacity > kLargestNotificationCapacity ||
      inbox_slots != std::bit_ceil(notification_capacity) || ring_capacity == 0 ||
      ring_capacity > kLargestRingCapacity)
    return false;
  const ArenaLayout expected = make(notification_capacity, ring_capacity);
  return inbox_offset == expected.inbox_offset && ring_offset == expected.ring_offset &&
         ring_capacity == expected.ring_capacity && size == expected.size && size == arena_size;
}

}  // namespace qpsock::transport::shm
