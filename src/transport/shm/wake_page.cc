#include "transport/shm/wake_page.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <new>

#include "common/own_descriptor.h"
#include "libc/next_symbols.h"

namespace qpsock::transport::shm {

size_t wake_page_size() {
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (sizeof(WakeBits) + page - 1) / page * page;
}

int OwnWakePage::create() {
  memfd_.reset(keep_own_descriptor(::memfd_create("qpsock-wake", MFD_CLOEXEC | MFD_ALLOW_SEALING)));
  if (!memfd_.valid()) return -errno;
  const size_t size = wake_page_size();
  if (::ftruncate(memfd_.get(), static_cast<off_t>(size)) != 0) return -errno;
  if (next::fcntl(memfd_.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return -errno;
  if (int error = memory_.map_shared(memfd_.get(), 0, size); error < 0) return error;
  new (memory_.data()) WakeBits{};  // a zeroed memfd: every bit clear already
  return 0;
}

void OwnWakePage::take_marked(stream::FunctionRef<void(uint32_t)> woken) {
  WakeBits& wake = bits();
  for (uint32_t group = 0; group < WakeBits::kSummaryWords; ++group) {
    if (wake.summary[group].load(std::memory_order_relaxed) == 0) continue;
    uint64_t words = wake.summary[group].exchange(0);
    while (words != 0) {
      const uint32_t word = group * 64 + static_cast<uint32_t>(std::countr_zero(words));
      words &= words - 1;
      uint64_t slots = wake.words[word].exchange(0);
      while (slots != 0) {
        woken(word * 64 + static_cast<uint32_t>(std::countr_zero(slots)));
        slots &= slots - 1;
      }
    }
  }
}

void mark_woken(WakeBits& bits, uint32_t slot) {
  if (slot >= kLinkChannels) return;
  const uint32_t word = slot / 64;
  bits.words[word].fetch_or(uint64_t{1} << (slot % 64));
  bits.summary[word / 64].fetch_or(uint64_t{1} << (word % 64));
}

int map_peer_wake_page(int fd, stream::MappedMemory& memory) {
  const int seals = next::fcntl(fd, F_GET_SEALS);
  if (seals < 0) return errno == EINVAL ? -EPROTO : -errno;
  if ((seals & F_SEAL_SHRINK) == 0) return -EPROTO;
  struct stat status {};
  if (::fstat(fd, &status) != 0) return -errno;
  if (static_cast<uint64_t>(status.st_size) < wake_page_size()) return -EPROTO;
  return memory.map_shared(fd, 0, wake_page_size());
}

}  // namespace qpsock::transport::shm
