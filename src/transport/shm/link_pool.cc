#include "transport/shm/link_pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <new>

#include "common/own_descriptor.h"
#include "libc/next_symbols.h"
#include "transport/shm/arena_layout.h"

namespace qpsock::transport::shm {
namespace {

// Arenas given back that one take() looks at for the peer's release.
constexpr size_t kReleasedLookedAt = 64;

uint64_t chunks_for(uint64_t bytes) { return (bytes + kPoolChunk - 1) / kPoolChunk; }

}  // namespace

uint64_t pool_size_class(uint64_t size) {
  if (size == 0 || size > kLargestRingCapacity + kPoolChunk) return 0;
  return (size + kPoolArenaAlignment - 1) / kPoolArenaAlignment * kPoolArenaAlignment;
}

PoolChunks::~PoolChunks() {
  for (const Mapping& mapping : mappings_) ::munmap(mapping.address, mapping.length);
}

int PoolChunks::map(int fd, uint64_t first, uint64_t count) {
  if (count == 0) return -EINVAL;
  const uint64_t end = first + count;
  if (find(first * kPoolChunk, count * kPoolChunk) != nullptr) return 0;
  void* mapped = ::mmap(nullptr, count * kPoolChunk, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_NORESERVE, fd, static_cast<off_t>(first * kPoolChunk));
  if (mapped == MAP_FAILED) return -errno;
  mappings_.push_back({static_cast<std::byte*>(mapped), count * kPoolChunk});
  if (chunks_.size() < end) chunks_.resize(end);
  // Chunks mapped before in another mapping now point here; the older
  // mapping stays for the arenas that found them there.
  for (uint64_t chunk = first; chunk < end; ++chunk)
    chunks_[chunk] = {static_cast<std::byte*>(mapped) + (chunk - first) * kPoolChunk, end};
  return 0;
}

std::byte* PoolChunks::find(uint64_t offset, uint64_t length) const {
  const uint64_t chunk = offset / kPoolChunk;
  if (length == 0 || chunk >= chunks_.size() || chunks_[chunk].address == nullptr) return nullptr;
  const uint64_t last = (offset + length - 1) / kPoolChunk;
  if (last >= chunks_[chunk].mapping_end) return nullptr;
  return chunks_[chunk].address + offset % kPoolChunk;
}

int OwnPool::create() {
  memfd_.reset(keep_own_descriptor(::memfd_create("qpsock-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING)));
  if (!memfd_.valid()) return -errno;
  // The peer gets this fd: it must never be able to shrink the file under
  // us (a SIGBUS on our next touch). Growing is ours.
  if (next::fcntl(memfd_.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) return -errno;
  if (int error = grow_locked(1); error < 0) return error;
  // A new memfd is zeroed, which is every field's first state (the mailbox
  // and offers are half a megabyte: constructing them would fault in every page).
  header_ = reinterpret_cast<PoolHeader*>(chunks_.find(0, sizeof(PoolHeader)));
  header_->magic = kPoolMagic;
  header_->version = kPoolVersion;
  bump_ = kPoolHeaderSize;
  return 0;
}

int OwnPool::grow_locked(uint64_t chunks) {
  const uint64_t first = file_size_ / kPoolChunk;
  const uint64_t size = file_size_ + chunks * kPoolChunk;
  if (size > kLargestPool) return -ENOSPC;
  if (::ftruncate(memfd_.get(), static_cast<off_t>(size)) != 0) return -errno;
  file_size_ = size;
  return chunks_.map(memfd_.get(), first, chunks);
}

void OwnPool::collect_released_locked(size_t most) {
  const size_t looked_at = std::min(waiting_.size(), most);
  size_t kept = 0;
  for (size_t index = 0; index < waiting_.size(); ++index) {
    Arena arena = waiting_[index];
    if (index < looked_at &&
        arena_released_flag(chunks_.find(arena.offset, arena.size_class))
                .load(std::memory_order_acquire) != 0) {
      // Its first part kept its pages: punched now, it is all punched.
      arena.punched = false;
      free_.push_back(arena);
    } else {
      waiting_[kept++] = arena;
    }
  }
  waiting_.resize(kept);
}

void OwnPool::punch_locked(uint64_t offset, uint64_t length) {
  // The pages go back to the kernel, from our mapping and the peer's.
  (void)::fallocate(memfd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    static_cast<off_t>(offset), static_cast<off_t>(length));
}

uint64_t OwnPool::warm_bytes() {
  std::lock_guard lock(mutex_);
  uint64_t warm = 0;
  for (const Arena& arena : free_) warm += arena.punched ? 0 : arena.size_class;
  for (const Arena& arena : waiting_) warm += arena.punched ? 0 : arena.size_class;
  return warm;
}

void OwnPool::trim() {
  std::lock_guard lock(mutex_);
  collect_released_locked(waiting_.size());
  uint64_t warm = 0;
  // The warm ones the next take() uses are the last free ones.
  std::sort(free_.begin(), free_.end(), [](const Arena& left, const Arena& right) {
    return left.punched != right.punched ? left.punched : left.offset < right.offset;
  });
  for (auto each = free_.rbegin(); each != free_.rend() && !each->punched; ++each) {
    if (warm + each->size_class <= kWarmPoolBytes) {
      warm += each->size_class;
      continue;
    }
    // Free arenas go whole, and neighbours in one call.
    uint64_t begin = each->offset;
    const uint64_t end = each->offset + each->size_class;
    each->punched = true;
    while (std::next(each) != free_.rend() && !std::next(each)->punched &&
           std::next(each)->offset + std::next(each)->size_class == begin) {
      ++each;
      each->punched = true;
      begin = each->offset;
    }
    punch_locked(begin, end - begin);
  }
  // The peer may still hold a waiting one: only its ring goes.
  for (Arena& arena : waiting_) {
    if (arena.punched) continue;
    if (warm + arena.size_class <= kWarmPoolBytes) {
      warm += arena.size_class;
      continue;
    }
    arena.punched = true;
    if (arena.ring_offset < arena.size_class)
      punch_locked(arena.offset + arena.ring_offset, arena.size_class - arena.ring_offset);
  }
}

int OwnPool::take(uint64_t size, uint64_t& offset, std::byte*& address, bool& reused,
                  uint32_t& registration_slots_used) {
  const uint64_t size_class = pool_size_class(size);
  if (size_class == 0) return -EINVAL;
  std::lock_guard lock(mutex_);
  if (!waiting_.empty()) collect_released_locked(kReleasedLookedAt);
  // The warmest of its class: from the back, where trim() leaves the warm ones.
  const auto reusable = std::find_if(free_.rbegin(), free_.rend(),
                                     [size_class](const Arena& arena) { return arena.size_class == size_class; });
  reused = reusable != free_.rend() && !reusable->punched;
  registration_slots_used = reused ? reusable->registration_slots_used : 0;
  if (reusable != free_.rend()) {
    offset = reusable->offset;
    free_.erase(std::next(reusable).base());
  } else {
    // A regular arena stays within one chunk; a larger one starts a span of
    // its own. Either way what is not mapped yet begins at the file's end
    // (a whole number of chunks), and is mapped as one.
    uint64_t at = bump_;
    if (size_class > kPoolChunk || at / kPoolChunk != (at + size_class - 1) / kPoolChunk)
      at = (at + kPoolChunk - 1) / kPoolChunk * kPoolChunk;
    const uint64_t end = at + size_class;
    if (end > file_size_)
      if (int error = grow_locked(chunks_for(end - file_size_)); error < 0) return error;
    offset = at;
    bump_ = end;
  }
  address = chunks_.find(offset, size_class);
  arena_released_flag(address).store(0, std::memory_order_relaxed);
  return 0;
}

void OwnPool::give_back(uint64_t offset, uint64_t size, uint64_t ring_offset,
                        uint32_t registration_slots_used) {
  std::lock_guard lock(mutex_);
  waiting_.push_back({offset, pool_size_class(size), ring_offset, registration_slots_used, false});
}

int PeerPool::attach(UniqueFd fd) {
  const int seals = next::fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0) return errno == EINVAL ? -EPROTO : -errno;
  if ((seals & F_SEAL_SHRINK) == 0) return -EPROTO;
  struct stat status {};
  if (::fstat(fd.get(), &status) != 0) return -errno;
  file_size_seen_ = static_cast<uint64_t>(status.st_size);
  if (file_size_seen_ < kPoolChunk) return -EPROTO;
  if (int error = chunks_.map(fd.get(), 0, 1); error < 0) return error;
  header_ = reinterpret_cast<PoolHeader*>(chunks_.find(0, sizeof(PoolHeader)));
  if (header_->magic != kPoolMagic || header_->version != kPoolVersion) return -EPROTO;
  memfd_ = std::move(fd);
  return 0;
}

std::byte* PeerPool::arena(uint64_t offset, uint64_t size) {
  const uint64_t size_class = pool_size_class(size);
  if (size_class == 0 || offset % kPoolArenaAlignment != 0 || offset < kPoolHeaderSize ||
      offset > kLargestPool || size_class > kLargestPool - offset)
    return nullptr;
  const bool large = size_class > kPoolChunk;
  if (large ? offset % kPoolChunk != 0 : offset / kPoolChunk != (offset + size_class - 1) / kPoolChunk)
    return nullptr;
  std::lock_guard lock(mutex_);
  if (offset + size_class > file_size_seen_) {
    struct stat status {};
    if (::fstat(memfd_.get(), &status) != 0) return nullptr;
    file_size_seen_ = static_cast<uint64_t>(status.st_size);
    if (offset + size_class > file_size_seen_) return nullptr;
  }
  const uint64_t first = offset / kPoolChunk;
  // A regular arena's chunk may hold more of the peer's: it is mapped whole.
  const uint64_t count = large ? chunks_for(size_class) : 1;
  if ((first + count) * kPoolChunk > file_size_seen_) return nullptr;
  if (chunks_.map(memfd_.get(), first, count) < 0) return nullptr;
  return chunks_.find(offset, size_class);
}

}  // namespace qpsock::transport::shm
