// The registration table in an arena's control part (arena_layout.h): the
// owner publishes its remote registrations there (RegistrationPublisher), the
// peer checks every remote access against it (resolve_registration) by key,
// access and bounds. A key is (generation << 8 | slot), so a stale key, or a
// key of another connection (another arena), matches nothing.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "stream/transport.h"
#include "transport/shm/arena_layout.h"
#include "transport/shm/local_arena.h"
#include "transport/shm/process_page.h"

namespace qpsock::transport::shm {

// Owner side. Thread-safe (registrations come and go on any thread).
class RegistrationPublisher {
 public:
  RegistrationPublisher(std::shared_ptr<LocalArena> arena, const ProcessPage* page, uint64_t epoch);

  // Publishes [address, address + length) for `access`; `arena_offset` is
  // where it lies in our arena, or kNotInArena. The key, or -errno:
  // -ENOSPC when every slot is taken, -ECONNRESET after revoke_all().
  int64_t publish(const void* address, size_t length, PublishedAccess access,
                  uint64_t arena_offset);
  // Revokes at once: the peer's next access with `key` fails.
  void revoke(uint32_t key);
  // Revokes everything and refuses later publishing (disconnect).
  void revoke_all();

 private:
  RegistrationEntry& entry(uint32_t slot) const { return arena_->registrations()[slot]; }

  std::shared_ptr<LocalArena> arena_;  // the table lives in its mapping
  const ProcessPage* page_;
  uint64_t epoch_;
  std::mutex mutex_;
  std::array<uint32_t, kRegistrationSlots> generations_{};
  bool closed_ = false;
};

// Peer side: where a checked remote access goes.
struct ResolvedRegion {
  uint64_t arena_offset;    // in the owner's arena, or kNotInArena:
  uint64_t remote_address;  // then the owner's virtual address (process_vm_readv)
};

// Checks `region` against the owner's table: 0, or -EFAULT when no published
// registration with region.key grants `access` over [address, address + length).
int resolve_registration(const RegistrationEntry* table, stream::RemoteRegion region, size_t length,
                         PublishedAccess access, ResolvedRegion& resolved);
// Whether `key` is still published (checked again after a read of private
// memory, so a read racing a deregistration fails rather than delivering).
bool still_published(const RegistrationEntry* table, uint32_t key);

}  // namespace qpsock::transport::shm
