// The memory one endpoint shares with its peer: its *arena*, a part of the
// owner's pool with the peer process (link_pool.h), mapped by both. Three
// page-aligned parts:
//
//   [ ControlBlock | RegistrationEntry x kRegistrationSlots ]  owner writes; the peer maps it
//   read-only [ InboxHeader  | uint32_t immediate slots                ]  the peer pushes
//   immediates here [ receive ring                                           ]  the peer's eager
//   writes land here
//
// Every field both processes touch after setup is a lock-free std::atomic
// (address-free, so valid across two mappings in two processes).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace qpsock::transport::shm {

inline constexpr uint64_t kArenaMagic = 0x3172616d'68737071;  // "qpshmar1"
inline constexpr uint32_t kLayoutVersion = 4;
inline constexpr uint32_t kRegistrationSlots = 256;  // published remote registrations at once
inline constexpr uint32_t kLargestNotificationCapacity = 1u << 20;
inline constexpr uint64_t kLargestRingCapacity = uint64_t{1} << 30;  // the engine's largest ring

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Where the parts of an arena lie (byte offsets in the memfd).
struct ArenaLayout {
  uint32_t notification_capacity;  // immediates the owner holds unpolled (its receive depth)
  uint32_t inbox_slots;            // a power of two >= notification_capacity
  uint64_t inbox_offset;
  uint64_t ring_offset;
  uint64_t ring_capacity;  // the largest receive ring the owner can map
  uint64_t size;           // of the whole memfd

  // The layout for these capacities, with page-aligned parts.
  static ArenaLayout make(uint32_t notification_capacity, uint64_t ring_capacity);
  // The size of the owner-written part (the same for every arena).
  static uint64_t owner_part_size();
  // Whether a layout read from a peer is self-consistent for an arena of `arena_size`.
  bool consistent_with(uint64_t arena_size) const;
};

// The owner's published facts and state (the peer only reads them).
struct ControlBlock {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  ArenaLayout layout;
  // A random word the peer reads with process_vm_readv at setup, at the
  // address the owner announced: proof that the pid is the arena's owner and
  // that the kernel lets the peer read its memory.
  uint64_t probe_word;
  // Immediates the owner has polled (the inbox's consumer index).
  alignas(64) std::atomic<uint64_t> inbox_head;
  // Set when the owner disconnected: the peer fails every later post.
  alignas(64) std::atomic<uint32_t> closed;
  // Ring bytes the owner's reader has consumed (Transport::publish_consumed):
  // still readable by the peer after the owner's death.
  alignas(64) std::atomic<uint64_t> ring_consumed;
};

// MemoryAccess values as stored in a RegistrationEntry.
enum class PublishedAccess : uint32_t { remote_write = 1, remote_read = 2 };

// One of the owner's remote registrations. A key is (generation << 8 | slot):
// the peer checks the slot still holds its key before (and, for a read of
// private memory, after) the access, so a deregistration revokes it at once
// and a key from another connection or an old registration matches nothing.
struct RegistrationEntry {
  std::atomic<uint32_t> key;      // 0: free
  std::atomic<uint32_t> access;   // PublishedAccess
  std::atomic<uint64_t> address;  // the owner's virtual address
  std::atomic<uint64_t> length;
  // The region's offset in the owner's arena, or kNotInArena: then the peer
  // reaches it with process_vm_readv.
  std::atomic<uint64_t> arena_offset;
};
inline constexpr uint64_t kNotInArena = ~uint64_t{0};

// The immediates the peer pushed (the inbox's producer index) and whether
// the owner sleeps, and how to wake it (wakeup.h); and whether the peer has
// let go of the arena for good (it writes nothing here after setting it:
// the owner's pool may then give the memory to another channel).
struct InboxHeader {
  alignas(64) std::atomic<uint64_t> tail;
  alignas(64) std::atomic<uint32_t> waiter;
  alignas(64) std::atomic<uint32_t> released;
};

// Where the registration table and the slots sit inside the parts.
inline constexpr size_t kRegistrationTableOffset = (sizeof(ControlBlock) + 63) / 64 * 64;
inline constexpr size_t kInboxSlotsOffset = (sizeof(InboxHeader) + 63) / 64 * 64;

// The released flag of the arena at `arena` (every layout's inbox part
// begins at ArenaLayout::owner_part_size()).
inline std::atomic<uint32_t>& arena_released_flag(std::byte* arena) {
  return reinterpret_cast<InboxHeader*>(arena + ArenaLayout::owner_part_size())->released;
}

}  // namespace qpsock::transport::shm
