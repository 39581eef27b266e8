#include "transport/shm/peer_arena.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "libc/next_symbols.h"

namespace qpsock::transport::shm {

int PeerArena::map(int fd, std::unique_ptr<PeerArena>& arena) {
  const int seals = next::fcntl(fd, F_GET_SEALS);
  if (seals < 0) return errno == EINVAL ? -EPROTO : -errno;
  if ((seals & F_SEAL_SHRINK) == 0) return -EPROTO;
  struct stat status {};
  if (::fstat(fd, &status) != 0) return -errno;
  const auto file_size = static_cast<uint64_t>(status.st_size);
  const uint64_t control_size = ArenaLayout::owner_part_size();
  if (file_size <= control_size) return -EPROTO;

  auto made = std::make_unique<PeerArena>();
  if (int error = made->control_.map_shared(fd, 0, control_size, false); error < 0) return error;
  const ControlBlock& control = made->control();
  const ArenaLayout layout = control.layout;
  if (control.magic != kArenaMagic || control.version != kLayoutVersion ||
      layout.inbox_offset != control_size || !layout.consistent_with(file_size))
    return -EPROTO;
  made->layout_ = layout;
  if (int error =
          made->writable_.map_shared(fd, layout.inbox_offset, layout.size - layout.inbox_offset);
      error < 0)
    return error;
  arena = std::move(made);
  return 0;
}

}  // namespace qpsock::transport::shm
