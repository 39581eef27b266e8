#include "transport/shm/process_page.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <new>

#include "common/random_word.h"

namespace qpsock::transport::shm {
namespace {

ProcessPage* map_process_page() {
  const size_t length = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* mapping =
      ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) return nullptr;
  if (::madvise(mapping, length, MADV_WIPEONFORK) != 0) {
    ::munmap(mapping, length);
    return nullptr;
  }
  // Zeroed memory is the page's initial state (and a child's): nothing to run.
  return new (mapping) ProcessPage{};
}

uint64_t fresh_epoch() {
  const uint64_t value = random_word();
  return value == 0 ? 1 : value;
}

}  // namespace

ProcessPage* process_page() {
  // Mapped once and never unmapped; a child inherits the (wiped) mapping.
  static ProcessPage* const page = map_process_page();
  return page;
}

uint64_t current_epoch() {
  ProcessPage* page = process_page();
  if (page == nullptr) return 0;
  uint64_t epoch = page->epoch.load(std::memory_order_acquire);
  if (epoch != 0) return epoch;
  const uint64_t fresh = fresh_epoch();
  if (page->epoch.compare_exchange_strong(epoch, fresh, std::memory_order_acq_rel)) return fresh;
  return epoch;  // another thread made it first
}

}  // namespace qpsock::transport::shm
