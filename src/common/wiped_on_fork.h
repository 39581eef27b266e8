// Memory that each process starts with zeroed, a forked child included
// (MADV_WIPEONFORK): for state that is one process's own and means nothing
// in a child (what it is forking now, whom it forked, its pid).
// Besides the reset, writing such memory never costs a copy-on-write fault
// after a fork: fork does not share its pages with the child, so the
// parent's writes find them writable still. A forking server writes its
// bookkeeping there at every connection. The pieces share one page while it
// lasts, so that a child touching several takes one fault for them all.
#pragma once

#include <atomic>
#include <cstddef>
#include <new>
#include <type_traits>

namespace qpsock {

// At library load (one thread): maps the shared page.
void prepare_wiped_on_fork_memory();

// In a forked child, before anything reads its wiped memory: writes the
// shared page first, so that the child takes one fault for it (a read first
// maps the zero page, and the write after it faults again).
void touch_wiped_memory_in_child();

// `size` zeroed bytes aligned to `alignment` (at most a page's), wiped in a
// child: a piece of the shared page, else a mapping of their own; null if
// MADV_WIPEONFORK cannot be had (a kernel before 4.14, a seccomp filter).
// Never freed. errno is left alone.
void* allocate_wiped_on_fork(size_t size, size_t alignment);

// The process's one T, whose all-zero bytes are its initial state, made on
// first use and never destroyed. No lock or guard variable: a fork while
// another thread makes it leaves the child nothing to wait for. Where no
// wiped memory can be had it lives in static storage, which a child
// inherits as it was: the child must then zero it itself (reset_in_child).
template <typename T>
class WipedOnFork {
  static_assert(std::is_trivially_destructible_v<T>, "never destroyed");

 public:
  static T& get() {
    if (T* object = object_.load(std::memory_order_acquire)) [[likely]] return *object;
    return make();
  }
  // In a forked child, first thing (single-threaded): the fallback's zeros.
  static void reset_in_child() {
    if (object_.load(std::memory_order_relaxed) == &fallback_) ::new (&fallback_) T{};
  }

 private:
  // Racing threads may each take a piece of wiped memory: the first
  // published wins, and the others' stay unused.
  static T& make() {
    void* memory = allocate_wiped_on_fork(sizeof(T), alignof(T));
    T* made = memory != nullptr ? ::new (memory) T{} : &fallback_;
    T* expected = nullptr;
    if (object_.compare_exchange_strong(expected, made, std::memory_order_acq_rel)) return *made;
    return *expected;
  }

  static inline constinit T fallback_{};
  static inline constinit std::atomic<T*> object_{nullptr};
};

}  // namespace qpsock
