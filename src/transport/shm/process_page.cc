#include "transport/shm/process_page.h"

#include <new>

#include "common/random_word.h"
#include "common/wiped_on_fork.h"

namespace qpsock::transport::shm {
namespace {

ProcessPage* map_process_page() {
  void* mapping = allocate_wiped_on_fork(sizeof(ProcessPage), alignof(ProcessPage));
  // Zeroed memory is its initial state (and a child's): nothing to run.
  return mapping != nullptr ? new (mapping) ProcessPage{} : nullptr;
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
