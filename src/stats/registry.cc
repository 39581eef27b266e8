#include "stats/registry.h"

#include <netinet/in.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>
#include <ctime>

#include "common/errno_guard.h"
#include "common/log.h"
#include "stats/runtime_directory.h"
#include "stats/slot_text.h"

namespace qpsock::stats {
namespace {

Handle make_handle(int view, uint32_t index, uint64_t generation) {
  return uint64_t(view + 1) << 61 | uint64_t{index} << 32 | (generation & 0xffffffffu);
}

int view_of(Handle handle) { return static_cast<int>(handle >> 61) - 1; }

void store_endpoint(const sockaddr* address, uint8_t& family, uint16_t& port, uint8_t (&bytes)[16]) {
  family = 0;
  port = 0;
  memset(bytes, 0, sizeof(bytes));
  if (address == nullptr) return;
  if (address->sa_family == AF_INET) {
    const auto* ipv4 = reinterpret_cast<const sockaddr_in*>(address);
    family = AF_INET;
    port = ntohs(ipv4->sin_port);
    memcpy(bytes, &ipv4->sin_addr, 4);
  } else if (address->sa_family == AF_INET6) {
    const auto* ipv6 = reinterpret_cast<const sockaddr_in6*>(address);
    family = AF_INET6;
    port = ntohs(ipv6->sin6_port);
    memcpy(bytes, &ipv6->sin6_addr, 16);
  }
}

// The private memory of a view: the references, the held bits, then a bit
// per word of those.
size_t references_bytes(uint32_t slot_count) {
  return (slot_count * sizeof(std::atomic<uint32_t>) + 7) / 8 * 8;
}
uint32_t held_word_count(uint32_t slot_count) { return (slot_count + 63) / 64; }
size_t private_bytes(uint32_t slot_count) {
  const uint32_t words = held_word_count(slot_count);
  return references_bytes(slot_count) + (words + (words + 63) / 64) * sizeof(std::atomic<uint64_t>);
}

uint64_t held_bit(uint32_t index) { return uint64_t{1} << (index % 64); }

// The word's bit goes up after the slot's: a visit that takes a word's bit
// down looks at the word again afterwards (visit_held), so seq_cst keeps
// either the slot's bit in its sight or the word's bit up.
void set_held(std::atomic<uint64_t>* held, std::atomic<uint64_t>* held_words, uint32_t index) {
  held[index / 64].fetch_or(held_bit(index));
  held_words[index / 64 / 64].fetch_or(held_bit(index / 64));
}

void clear_held(std::atomic<uint64_t>* held, uint32_t index) {
  held[index / 64].fetch_and(~held_bit(index), std::memory_order_relaxed);
}

// Slots [0, used_slots) have ever been claimed: raises the mark to index + 1.
void note_used(format::FileHeader& header, uint32_t index) {
  uint32_t used = header.used_slots.load(std::memory_order_relaxed);
  while (used <= index &&
         !header.used_slots.compare_exchange_weak(used, index + 1, std::memory_order_release)) {
  }
}

}  // namespace

Registry::Registry(const char* directory, uint32_t slot_count)
    : directory_(directory), slot_count_(slot_count) {}

Registry::~Registry() {
  release_all();
  for (View& view : views_) {
    if (!view.mapped_here) continue;
    unmap_stats_file(view.file);
    munmap(view.references, private_bytes(view.slot_count));
  }
}

pid_t Registry::current_pid() {
  pid_t pid = pid_.load(std::memory_order_relaxed);
  if (pid == 0) [[unlikely]] {
    pid = getpid();
    pid_.store(pid, std::memory_order_relaxed);
  }
  return pid;
}

const char* Registry::file_path() const {
  int view = own_view_.load(std::memory_order_acquire);
  return view >= 0 ? views_[view].file.path : "";
}

const format::FileHeader* Registry::header() const {
  int view = own_view_.load(std::memory_order_acquire);
  return view >= 0 ? format::header_of(views_[view].file.mapping) : nullptr;
}

int Registry::own_view() {
  int view = own_view_.load(std::memory_order_acquire);
  if (view >= 0) [[likely]] return view;
  if (view != kNoFile) return -1;  // another thread is making it (rare), or none can be made
  return create_own_view();
}

int Registry::create_own_view() {
  int expected = kNoFile;
  // One thread makes the file. Others (or a signal handler interrupting the
  // maker) do not wait for it: their connection is simply not recorded.
  if (!own_view_.compare_exchange_strong(expected, kCreating, std::memory_order_acq_rel)) return -1;
  ErrnoGuard errno_guard;
  int free_view = -1;
  for (int index = 0; index < kViews && free_view < 0; ++index) {
    if (views_[index].file.mapping == nullptr) free_view = index;
  }
  char directory[PATH_MAX];
  bool have_directory = directory_ != nullptr
                            ? snprintf(directory, sizeof(directory), "%s", directory_) > 0
                            : prepare_runtime_directory(directory, sizeof(directory));
  View* view = free_view >= 0 ? &views_[free_view] : nullptr;
  void* references = MAP_FAILED;
  if (view != nullptr && have_directory) {
    references = mmap(nullptr, private_bytes(slot_count_), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  if (references == MAP_FAILED ||
      !create_stats_file(directory, identify_this_process(), slot_count_, view->file)) {
    if (references != MAP_FAILED) munmap(references, private_bytes(slot_count_));
    QPSOCK_LOG(info, "connection statistics are off: no statistics file in %s (%s)",
               have_directory ? directory : "any runtime directory",
               view == nullptr ? "too many inherited files" : strerror(errno));
    own_view_.store(kUnavailable, std::memory_order_release);
    return -1;
  }
  view->slot_count = slot_count_;
  // held before references: the fork steps look at a view once references is set.
  view->held = reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(references) +
                                                         references_bytes(slot_count_));
  view->held_words = view->held + held_word_count(slot_count_);
  view->references = static_cast<std::atomic<uint32_t>*>(references);
  view->cursor.store(0, std::memory_order_relaxed);
  view->mapped_here = true;
  current_pid();
  own_view_.store(free_view, std::memory_order_release);
  QPSOCK_LOG(debug, "connection statistics in %s", view->file.path);
  return free_view;
}

Handle Registry::open(const sockaddr* local, const sockaddr* peer, Role role, Path path,
                      const char* decision, const char* reason) {
  const int view_index = own_view();
  if (view_index < 0) return 0;
  View& view = views_[view_index];
  format::FileHeader& header = *format::header_of(view.file.mapping);
  format::Slot* slots = format::slots_of(view.file.mapping);
  for (uint32_t attempt = 0; attempt < view.slot_count; ++attempt) {
    const uint32_t index = view.cursor.fetch_add(1, std::memory_order_relaxed) % view.slot_count;
    format::Slot& slot = slots[index];
    uint64_t state = slot.state.load(std::memory_order_relaxed);
    if (format::state_of(state) != format::SlotState::free) continue;
    const uint64_t generation = format::generation_of(state) + 1;
    if (!slot.state.compare_exchange_strong(state, format::make_state(generation, format::SlotState::claimed),
                                            std::memory_order_acquire)) {
      continue;
    }
    // Claimed: no one else writes these fields until it is open.
    for (auto& direction : slot.bytes)
      for (auto& counter : direction) counter.store(0, std::memory_order_relaxed);
    for (auto& counter : slot.zero_copy_bytes) counter.store(0, std::memory_order_relaxed);
    slot.opened_ns = realtime_ns();
    slot.path.store(static_cast<uint8_t>(path), std::memory_order_relaxed);
    slot.role = static_cast<uint8_t>(role);
    store_endpoint(local, slot.local_family, slot.local_port, slot.local_address);
    store_endpoint(peer, slot.peer_family, slot.peer_port, slot.peer_address);
    slot.pending_forks.store(0, std::memory_order_relaxed);
    for (auto& user : slot.users) user.store(0, std::memory_order_relaxed);
    slot.users[0].store(current_pid(), std::memory_order_relaxed);
    copy_text(slot.decision, sizeof(slot.decision), decision);
    write_reason(slot, reason);
    set_held(view.held, view.held_words, index);
    view.references[index].store(1, std::memory_order_relaxed);
    note_used(header, index);
    slot.state.store(format::make_state(generation, format::SlotState::open), std::memory_order_release);
    return make_handle(view_index, index, generation);
  }
  header.dropped.fetch_add(1, std::memory_order_relaxed);
  if (!reported_full_.exchange(true, std::memory_order_relaxed)) {
    QPSOCK_LOG(warn, "connection statistics: all %u slots in use; new connections are not "
               "recorded (qpsock-stat counts them as dropped)", view.slot_count);
  }
  return 0;
}

void Registry::set_path(Handle handle, Path path, const char* reason) {
  if (format::Slot* slot = find(handle)) {
    write_reason(*slot, reason);
    slot->path.store(static_cast<uint8_t>(path), std::memory_order_release);
  }
}

bool Registry::settle_pending(Handle handle, Path path, const char* reason) {
  format::Slot* slot = find(handle);
  if (slot == nullptr) return false;
  uint8_t expected = static_cast<uint8_t>(Path::pending);
  if (!slot->path.compare_exchange_strong(expected, static_cast<uint8_t>(path), std::memory_order_acq_rel))
    return false;
  write_reason(*slot, reason);
  return true;
}

Path Registry::path(Handle handle) const {
  const format::Slot* slot = find(handle);
  return slot != nullptr ? static_cast<Path>(slot->path.load(std::memory_order_acquire)) : Path::kernel;
}

void Registry::add_reference(Handle handle) {
  if (find(handle) != nullptr) {
    View& view = views_[view_of(handle)];
    // Counted first: a last reference dropped meanwhile then keeps its bit
    // (drop_reference), or this sets it again.
    view.references[handle_index(handle)].fetch_add(1, std::memory_order_relaxed);
    set_held(view.held, view.held_words, handle_index(handle));
  }
}

void Registry::close(Handle handle) {
  if (find(handle) != nullptr) drop_reference(views_[view_of(handle)], handle_index(handle));
}

void Registry::drop_reference(View& view, uint32_t index) {
  std::atomic<uint32_t>& references = view.references[index];
  uint32_t count = references.load(std::memory_order_relaxed);
  do {
    if ((count & ~kForkMark) == 0) return;  // nothing held (after exec failed, say)
  } while (!references.compare_exchange_weak(count, count - 1, std::memory_order_acq_rel));
  if (((count - 1) & ~kForkMark) != 0) return;
  // The bit goes only with nothing left: a slot marked for a fork keeps it,
  // for the fork's later steps to visit (in the parent and the child).
  if (count - 1 == 0) {
    clear_held(view.held, index);
    // Another thread's dup or a fork's mark may have come meanwhile.
    if (references.load(std::memory_order_relaxed) != 0) set_held(view.held, view.held_words, index);
  }
  format::Slot& slot = format::slots_of(view.file.mapping)[index];
  leave(slot, slot.state.load(std::memory_order_acquire));
  // The next open looks here first: a process whose connections come and
  // go keeps to a few slots (pages touched, and rows qpsock-stat scans).
  if (format::state_of(slot.state.load(std::memory_order_relaxed)) == format::SlotState::free)
    view.cursor.store(index, std::memory_order_relaxed);
}

void Registry::join(format::Slot& slot) {
  const pid_t pid = current_pid();
  for (auto& user : slot.users) {
    int32_t empty = 0;
    if (user.compare_exchange_strong(empty, pid, std::memory_order_acq_rel)) return;
  }
  // Every entry taken: the bytes still count, the row just does not list us.
}

void Registry::leave(format::Slot& slot, uint64_t state) {
  const pid_t pid = current_pid();
  for (auto& user : slot.users) {
    int32_t mine = pid;
    if (user.compare_exchange_strong(mine, 0, std::memory_order_acq_rel)) break;
  }
  free_if_unused(slot, state);
}

void Registry::free_if_unused(format::Slot& slot, uint64_t state) {
  if (format::state_of(state) != format::SlotState::open) return;
  if (slot.pending_forks.load(std::memory_order_acquire) != 0) return;
  for (auto& user : slot.users)
    if (user.load(std::memory_order_acquire) != 0) return;
  const uint64_t freed = format::make_state(format::generation_of(state), format::SlotState::free);
  slot.state.compare_exchange_strong(state, freed, std::memory_order_acq_rel);
}

template <typename Visit>
void Registry::visit_held(const View& view, Visit visit) {
  if (view.held == nullptr) return;
  // One visit at a time takes word bits down; a visit that met another
  // under way reads every word, since a bit it finds down may be one the
  // other took down for a moment.
  const bool alone = !visiting_.exchange(true);
  const uint32_t word_count = held_word_count(view.slot_count);
  const uint32_t summaries = (word_count + 63) / 64;
  for (uint32_t summary = 0; summary < summaries; ++summary) {
    uint64_t words = alone ? view.held_words[summary].load() : ~uint64_t{0};
    while (words != 0) {
      const uint32_t word = summary * 64 + static_cast<uint32_t>(std::countr_zero(words));
      words &= words - 1;
      if (word >= word_count) break;
      uint64_t bits = view.held[word].load();
      if (bits == 0 && !alone) continue;
      if (bits == 0) {
        // Down, then look again: a bit set meanwhile puts it back up.
        view.held_words[summary].fetch_and(~held_bit(word));
        bits = view.held[word].load();
        if (bits == 0) continue;
        view.held_words[summary].fetch_or(held_bit(word));
      }
      while (bits != 0) {
        visit(word * 64 + static_cast<uint32_t>(std::countr_zero(bits)));
        bits &= bits - 1;
      }
    }
  }
  if (alone) visiting_.store(false);
}

void Registry::before_fork() {
  // Two threads forking at once: only the first marks; the other's child
  // keeps counting bytes but is not listed as a user.
  if (forking_.exchange(true, std::memory_order_acq_rel)) return;
  for (View& view : views_) {
    if (view.file.mapping == nullptr || view.references == nullptr) continue;
    format::Slot* slots = format::slots_of(view.file.mapping);
    visit_held(view, [&](uint32_t index) {
      if (view.references[index].load(std::memory_order_relaxed) == 0) return;
      slots[index].pending_forks.fetch_add(1, std::memory_order_acq_rel);
      view.references[index].fetch_or(kForkMark, std::memory_order_relaxed);
      // Marked, so visited after the fork even if its last reference went
      // just before the mark (and took the bit).
      set_held(view.held, view.held_words, index);
    });
  }
}

void Registry::after_fork_in_parent(bool fork_failed) {
  if (!forking_.load(std::memory_order_acquire)) return;
  for (View& view : views_) {
    if (view.file.mapping == nullptr || view.references == nullptr) continue;
    format::Slot* slots = format::slots_of(view.file.mapping);
    visit_held(view, [&](uint32_t index) {
      if ((view.references[index].load(std::memory_order_relaxed) & kForkMark) == 0) return;
      view.references[index].fetch_and(~kForkMark, std::memory_order_relaxed);
      if (!fork_failed) return;  // the child takes the mark off the slot
      slots[index].pending_forks.fetch_sub(1, std::memory_order_acq_rel);
      free_if_unused(slots[index], slots[index].state.load(std::memory_order_acquire));
    });
  }
  forking_.store(false, std::memory_order_release);
}

void Registry::after_fork_in_child() {
  pid_.store(getpid(), std::memory_order_relaxed);
  forking_.store(false, std::memory_order_relaxed);
  reported_full_.store(false, std::memory_order_relaxed);
  // The parent's file stays mapped here (inherited handles point into it),
  // but it is not ours: our own connections get a file of our own.
  const int own = own_view_.load(std::memory_order_relaxed);
  if (own >= 0) views_[own].mapped_here = false;
  if (own != kUnavailable) own_view_.store(kNoFile, std::memory_order_relaxed);
  for (View& view : views_) {
    if (view.file.mapping == nullptr || view.references == nullptr) continue;
    format::Slot* slots = format::slots_of(view.file.mapping);
    visit_held(view, [&](uint32_t index) {
      const uint32_t count = view.references[index].load(std::memory_order_relaxed);
      if ((count & kForkMark) == 0) return;
      view.references[index].store(count & ~kForkMark, std::memory_order_relaxed);
      format::Slot& slot = slots[index];
      if ((count & ~kForkMark) != 0) join(slot);
      slot.pending_forks.fetch_sub(1, std::memory_order_acq_rel);
      if ((count & ~kForkMark) == 0) free_if_unused(slot, slot.state.load(std::memory_order_acquire));
    });
  }
}

void Registry::release_all() {
  ErrnoGuard errno_guard;
  const int own = own_view_.exchange(kUnavailable, std::memory_order_acq_rel);
  for (View& view : views_) {
    if (view.file.mapping == nullptr || view.references == nullptr) continue;
    visit_held(view, [&](uint32_t index) {
      if ((view.references[index].load(std::memory_order_relaxed) & ~kForkMark) == 0) return;
      view.references[index].store(1, std::memory_order_relaxed);
      drop_reference(view, index);
    });
  }
  if (own < 0) return;
  // Our file goes, unless a child still holds a row in it (only slots ever
  // claimed can be open).
  View& view = views_[own];
  const format::Slot* slots = format::slots_of(view.file.mapping);
  const uint32_t used =
      std::min(format::header_of(view.file.mapping)->used_slots.load(std::memory_order_acquire), view.slot_count);
  for (uint32_t index = 0; index < used; ++index) {
    if (format::state_of(slots[index].state.load(std::memory_order_acquire)) == format::SlotState::open)
      return;
  }
  remove_stats_file(view.file);
}

}  // namespace qpsock::stats
