#include "transport/shm/local_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <new>

#include "common/own_descriptor.h"
#include "common/random_word.h"

namespace qpsock::transport::shm {
namespace {

// Shows as "/memfd:qpsock (deleted)" in /proc/PID/maps.
constexpr const char* kMemfdName = "qpsock";

}  // namespace

int LocalArena::create(const ArenaLayout& layout, std::unique_ptr<LocalArena>& arena) {
  auto made = std::make_unique<LocalArena>();
  made->layout_ = layout;
  made->memfd_.reset(
      keep_own_descriptor(::memfd_create(kMemfdName, MFD_CLOEXEC | MFD_ALLOW_SEALING)));
  if (!made->memfd_.valid()) return -errno;
  const int fd = made->memfd_.get();
  if (::ftruncate(fd, static_cast<off_t>(layout.size)) != 0) return -errno;
  // The peer gets this fd: it must never be able to shrink the file under
  // us (a SIGBUS on our next touch), nor grow it.
  if (next::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) return -errno;
  if (int error = made->shared_.map_shared(fd, 0, layout.ring_offset); error < 0) return error;
  // The memfd starts zeroed, which is every atomic's initial state.
  auto* control = new (made->shared_.data()) ControlBlock{};
  control->magic = kArenaMagic;
  control->version = kLayoutVersion;
  control->layout = layout;
  control->probe_word = random_word();
  new (made->shared_.data() + layout.inbox_offset) InboxHeader{};
  arena = std::move(made);
  return 0;
}

int LocalArena::map_ring(size_t length, stream::MappedMemory& ring) {
  if (ring_address_ != nullptr || !memfd_.valid()) return -EBUSY;
  if (length == 0 || length > layout_.ring_capacity) return -EINVAL;
  if (int error = ring.map_shared(memfd_.get(), layout_.ring_offset, length); error < 0)
    return error;
  ring_address_ = ring.data();
  ring_length_ = length;
  memfd_.reset();
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
