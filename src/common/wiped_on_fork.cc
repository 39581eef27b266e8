// Memory that a forked child finds zeroed: one shared page cut into pieces,
// and mappings of their own once it is used up.
#include "common/wiped_on_fork.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <new>

#include "common/errno_guard.h"

namespace qpsock {
namespace {

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

void* map_wiped(size_t length) {
  const size_t whole = (length + page_size() - 1) / page_size() * page_size();
  void* mapping = ::mmap(nullptr, whole, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) return nullptr;
  if (::madvise(mapping, whole, MADV_WIPEONFORK) != 0) {
    ::munmap(mapping, whole);
    return nullptr;
  }
  return mapping;
}

// Set at load, before any other thread can ask; only `shared_used` moves after.
char* shared_page = nullptr;
// The page's first word is touch_wiped_memory_in_child's to write.
constexpr size_t kTouchWordBytes = sizeof(std::atomic<uint64_t>);
std::atomic<size_t> shared_used{kTouchWordBytes};

void* shared_piece(size_t size, size_t alignment) {
  if (shared_page == nullptr) return nullptr;
  size_t used = shared_used.load(std::memory_order_relaxed);
  for (;;) {
    const size_t start = (used + alignment - 1) / alignment * alignment;
    if (start + size > page_size()) return nullptr;
    if (shared_used.compare_exchange_weak(used, start + size, std::memory_order_relaxed))
      return shared_page + start;
  }
}

}  // namespace

void prepare_wiped_on_fork_memory() {
  const ErrnoGuard errno_guard;
  if (shared_page == nullptr) shared_page = static_cast<char*>(map_wiped(page_size()));
}

void touch_wiped_memory_in_child() {
  if (shared_page == nullptr) return;
  ::new (shared_page) std::atomic<uint64_t>{0};
}

void* allocate_wiped_on_fork(size_t size, size_t alignment) {
  if (void* piece = shared_piece(size, alignment)) return piece;
  const ErrnoGuard errno_guard;
  return map_wiped(size);
}

}  // namespace qpsock
