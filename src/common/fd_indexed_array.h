// One element per possible file descriptor, for per-fd state that must be
// lock-free (threads, signal handlers, fork). The elements live in an
// anonymous mapping sized from RLIMIT_NOFILE's hard limit (capped at Linux's
// default fs.nr_open), made on first use; pages are only touched for fds that
// are used. Elements must be valid zero-filled (atomics holding 0, pointers
// null). An fd beyond the array has no element.
#pragma once

#include <atomic>
#include <cstddef>

namespace qpsock {

namespace fd_indexed_memory {
// How many fds the process may ever have, from RLIMIT_NOFILE.
size_t capacity_from_rlimit();
// `bytes` of zero-filled memory, or null. A forked child inherits the
// parent's view of it without faulting in what the parent had touched.
void* map_zeroed(size_t bytes);
void unmap(void* memory, size_t bytes);
}  // namespace fd_indexed_memory

template <typename Element>
class FdIndexedArray {
 public:
  // Sized on first use, never unmapped: other threads may still use sockets
  // while the process exits.
  constexpr FdIndexedArray() = default;
  // A fixed size, unmapped on destruction (tests).
  explicit FdIndexedArray(size_t capacity) : owns_mapping_(true) {
    capacity_.store(capacity, std::memory_order_relaxed);
    elements_.store(static_cast<Element*>(fd_indexed_memory::map_zeroed(capacity * sizeof(Element))),
                    std::memory_order_release);
  }
  ~FdIndexedArray() {
    if (owns_mapping_ && elements_.load() != nullptr)
      fd_indexed_memory::unmap(elements_.load(), capacity_.load() * sizeof(Element));
  }
  FdIndexedArray(const FdIndexedArray&) = delete;
  FdIndexedArray& operator=(const FdIndexedArray&) = delete;

  // fd's element, or null (negative fd, beyond the capacity, no memory).
  Element* at(int fd) const {
    Element* all = elements();
    if (all == nullptr || fd < 0) [[unlikely]] return nullptr;
    if (static_cast<size_t>(fd) >= capacity_.load(std::memory_order_relaxed)) return nullptr;
    return &all[fd];
  }

  size_t capacity() const {
    elements();
    return capacity_.load(std::memory_order_relaxed);
  }

 private:
  Element* elements() const {
    Element* current = elements_.load(std::memory_order_acquire);
    if (current != nullptr) [[likely]] return current;
    return map_on_first_use();
  }

  // Racing threads (or a signal handler) each map; one wins, the others unmap
  // theirs. No lock, so nothing can deadlock here.
  Element* map_on_first_use() const {
    const size_t capacity = fd_indexed_memory::capacity_from_rlimit();
    auto* mapped = static_cast<Element*>(fd_indexed_memory::map_zeroed(capacity * sizeof(Element)));
    if (mapped == nullptr) return nullptr;
    capacity_.store(capacity, std::memory_order_relaxed);
    Element* expected = nullptr;
    if (!elements_.compare_exchange_strong(expected, mapped, std::memory_order_acq_rel)) {
      fd_indexed_memory::unmap(mapped, capacity * sizeof(Element));
      return expected;
    }
    return mapped;
  }

  mutable std::atomic<Element*> elements_{nullptr};
  mutable std::atomic<size_t> capacity_{0};
  bool owns_mapping_ = false;
};

}  // namespace qpsock
