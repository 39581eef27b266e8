#include "common/fd_indexed_array.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include "common/errno_guard.h"

namespace qpsock::fd_indexed_memory {
namespace {

// Linux's default fs.nr_open; a hard limit above it (or unlimited) is capped here.
constexpr size_t kMaximumCapacity = size_t{1} << 20;
constexpr size_t kMinimumCapacity = 1024;

}  // namespace

size_t capacity_from_rlimit() {
  ErrnoGuard errno_guard;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return kMinimumCapacity;
  size_t capacity = limit.rlim_max == RLIM_INFINITY ? kMaximumCapacity
                                                    : static_cast<size_t>(limit.rlim_max);
  if (capacity > kMaximumCapacity) capacity = kMaximumCapacity;
  if (capacity < kMinimumCapacity) capacity = kMinimumCapacity;
  return capacity;
}

void* map_zeroed(size_t bytes) {
  ErrnoGuard errno_guard;
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) return nullptr;
  // Written once, before anyone can use it: fork copies the page table of a
  // mapping that has been written (one only ever read is left for the child
  // to fault in again), so a forked child reads the elements its parent has
  // read, or written, without a fault of its own.
  *static_cast<volatile unsigned char*>(memory) = 0;
  return memory;
}

void unmap(void* memory, size_t bytes) {
  ErrnoGuard errno_guard;
  munmap(memory, bytes);
}

}  // namespace qpsock::fd_indexed_memory
