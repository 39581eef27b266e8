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
#include "common/wiped_on_fork.h"
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

uint32_t group_count(uint32_t slot_count) { return (slot_count + 63) / 64; }
size_t held_groups_bytes(uint32_t slot_count) {
  return (group_count(slot_count) + 63) / 64 * sizeof(std::atomic<uint64_t>);
}

uint64_t held_bit(uint32_t index) { return uint64_t{1} << (index % 64); }

constexpr size_t state_bytes() { return 64; }

// Slots [0, used_slots) have ever been claimed: raises the mark to index + 1.
void note_used(format::FileHeader& header, uint32_t index) {
  uint32_t used = header.used_slots.load(std::memory_order_relaxed);
  while (used <= index &&
         !header.used_slots.compare_exchange_weak(used, index + 1, std::memory_order_release)) {
  }
}

// This process's pid, read once: 0 in a fresh child (wiped).
struct ProcessId {
  std::atomic<pid_t> pid;
};
using ProcessIdMemory = WipedOnFork<ProcessId>;

pid_t current_pid() {
  std::atomic<pid_t>& cached = ProcessIdMemory::get().pid;
  pid_t pid = cached.load(std::memory_order_relaxed);
  if (pid == 0) [[unlikely]] {
    pid = getpid();
    cached.store(pid, std::memory_order_relaxed);
  }
  return pid;
}

}  // namespace

// The state, the bits per group, the groups: all 8-byte aligned.
size_t Registry::private_bytes(uint32_t slot_count) {
  return state_bytes() + held_groups_bytes(slot_count) + group_count(slot_count) * sizeof(SlotGroup);
}

// The group's bit goes up after the slot's: a visit that takes a group's bit
// down looks at the group again afterwards (visit_held), so seq_cst keeps
// either the slot's bit in its sight or the group's bit up.
void Registry::View::set_held(uint32_t index) const {
  held(index / 64).fetch_or(held_bit(index));
  held_groups[index / 64 / 64].fetch_or(held_bit(index / 64));
}

void Registry::View::clear_held(uint32_t index) const {
  held(index / 64).fetch_and(~held_bit(index), std::memory_order_relaxed);
}

Registry::Registry(const char* directory, uint32_t slot_count)
    : directory_(directory), slot_count_(slot_count) {}

Registry::~Registry() {
  release_all();
  for (int index = 0; index < kViews; ++index) {
    if (!owns(index)) continue;
    View& view = views_[index];
    unmap_stats_file(view.file);
    munmap(view.state, private_bytes(view.slot_count));
  }
}

bool Registry::owns(int view) const {
  return view >= 0 && views_[view].mine != nullptr && views_[view].mine->load(std::memory_order_relaxed);
}

const char* Registry::file_path() const {
  int view = own_view_.load(std::memory_order_acquire);
  return owns(view) ? views_[view].file.path : "";
}

const format::FileHeader* Registry::header() const {
  int view = own_view_.load(std::memory_order_acquire);
  return owns(view) ? format::header_of(views_[view].file.mapping) : nullptr;
}

int Registry::own_view() {
  int view = own_view_.load(std::memory_order_acquire);
  if (owns(view)) [[likely]] return view;
  // The view a forked child inherited is its parent's: it makes its own.
  if (view != kNoFile && view < 0) return -1;  // another thread is making it (rare), or none can be made
  return create_own_view(view);
}

int Registry::create_own_view(int expected) {
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
  void* memory = MAP_FAILED;
  if (view != nullptr && have_directory) {
    memory = mmap(nullptr, private_bytes(slot_count_), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                  -1, 0);
  }
  if (memory == MAP_FAILED ||
      !create_stats_file(directory, identify_this_process(), slot_count_, view->file)) {
    if (memory != MAP_FAILED) munmap(memory, private_bytes(slot_count_));
    QPSOCK_LOG(info, "connection statistics are off: no statistics file in %s (%s)",
               have_directory ? directory : "any runtime directory",
               view == nullptr ? "too many inherited files" : strerror(errno));
    own_view_.store(kUnavailable, std::memory_order_release);
    return -1;
  }
  view->slot_count = slot_count_;
  static_assert(sizeof(ViewState) <= state_bytes() && state_bytes() % alignof(SlotGroup) == 0);
  static_assert(kViews < 8, "a handle keeps view + 1 in three bits");
  view->state = ::new (memory) ViewState{};
  char* const after_state = static_cast<char*>(memory) + state_bytes();
  view->held_groups = reinterpret_cast<std::atomic<uint64_t>*>(after_state);
  // A child forked from here on finds `mine` false: zeroed, or cleared by after_fork_in_child.
  void* wiped = allocate_wiped_on_fork(sizeof(std::atomic<bool>), alignof(std::atomic<bool>));
  view->mine = wiped != nullptr ? ::new (wiped) std::atomic<bool>{} : &view->state->mine_unwiped;
  view->mine->store(true, std::memory_order_relaxed);
  // Last: the fork steps look at a view once its groups are set.
  view->groups.store(reinterpret_cast<SlotGroup*>(after_state + held_groups_bytes(slot_count_)),
                     std::memory_order_release);
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
    const uint32_t index = view.state->cursor.fetch_add(1, std::memory_order_relaxed) % view.slot_count;
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
    view.set_held(index);
    view.references(index).store(1, std::memory_order_relaxed);
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
    view.references(handle_index(handle)).fetch_add(1, std::memory_order_relaxed);
    view.set_held(handle_index(handle));
  }
}

void Registry::close(Handle handle) {
  if (find(handle) != nullptr) drop_reference(views_[view_of(handle)], handle_index(handle));
}

void Registry::drop_reference(View& view, uint32_t index) {
  std::atomic<uint32_t>& references = view.references(index);
  uint32_t count = references.load(std::memory_order_relaxed);
  do {
    if ((count & ~kForkMark) == 0) return;  // nothing held (after exec failed, say)
  } while (!references.compare_exchange_weak(count, count - 1, std::memory_order_acq_rel));
  if (((count - 1) & ~kForkMark) != 0) return;
  // The bit goes only with nothing left: a slot marked for a fork keeps it,
  // for the fork's later steps to visit (in the parent and the child).
  if (count - 1 == 0) {
    view.clear_held(index);
    // Another thread's dup or a fork's mark may have come meanwhile.
    if (references.load(std::memory_order_relaxed) != 0) view.set_held(index);
  }
  format::Slot& slot = format::slots_of(view.file.mapping)[index];
  leave(slot, slot.state.load(std::memory_order_acquire));
  // The next open looks here first: a process whose connections come and
  // go keeps to a few slots (pages touched, and rows qpsock-stat scans).
  if (format::state_of(slot.state.load(std::memory_order_relaxed)) == format::SlotState::free)
    view.state->cursor.store(index, std::memory_order_relaxed);
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
  if (view.group_array() == nullptr) return;
  // One visit at a time takes group bits down; a visit that met another
  // under way reads every group, since a bit it finds down may be one the
  // other took down for a moment.
  const bool alone = !view.state->visiting.exchange(true);
  const uint32_t groups = group_count(view.slot_count);
  const uint32_t summaries = (groups + 63) / 64;
  for (uint32_t summary = 0; summary < summaries; ++summary) {
    uint64_t marked = alone ? view.held_groups[summary].load() : ~uint64_t{0};
    while (marked != 0) {
      const uint32_t group = summary * 64 + static_cast<uint32_t>(std::countr_zero(marked));
      marked &= marked - 1;
      if (group >= groups) break;
      uint64_t bits = view.held(group).load();
      if (bits == 0 && !alone) continue;
      if (bits == 0) {
        // Down, then look again: a bit set meanwhile puts it back up.
        view.held_groups[summary].fetch_and(~held_bit(group));
        bits = view.held(group).load();
        if (bits == 0) continue;
        view.held_groups[summary].fetch_or(held_bit(group));
      }
      while (bits != 0) {
        visit(group * 64 + static_cast<uint32_t>(std::countr_zero(bits)));
        bits &= bits - 1;
      }
    }
  }
  if (alone) view.state->visiting.store(false);
}

void Registry::before_fork() {
  for (View& view : views_) {
    if (view.file.mapping == nullptr || view.group_array() == nullptr) continue;
    // Two threads forking at once: only the first marks; the other's child
    // keeps counting bytes but is not listed as a user.
    if (view.state->forking.exchange(true, std::memory_order_acq_rel)) continue;
    format::Slot* slots = format::slots_of(view.file.mapping);
    visit_held(view, [&](uint32_t index) {
      if (view.references(index).load(std::memory_order_relaxed) == 0) return;
      slots[index].pending_forks.fetch_add(1, std::memory_order_acq_rel);
      view.references(index).fetch_or(kForkMark, std::memory_order_relaxed);
      // Marked, so visited after the fork even if its last reference went
      // just before the mark (and took the bit).
      view.set_held(index);
    });
  }
}

void Registry::after_fork_in_parent(bool fork_failed) {
  for (View& view : views_) {
    if (view.file.mapping == nullptr || view.group_array() == nullptr) continue;
    if (!view.state->forking.load(std::memory_order_acquire)) continue;
    format::Slot* slots = format::slots_of(view.file.mapping);
    visit_held(view, [&](uint32_t index) {
      if ((view.references(index).load(std::memory_order_relaxed) & kForkMark) == 0) return;
      view.references(index).fetch_and(~kForkMark, std::memory_order_relaxed);
      if (!fork_failed) return;  // the child takes the mark off the slot
      slots[index].pending_forks.fetch_sub(1, std::memory_order_acq_rel);
      free_if_unused(slots[index], slots[index].state.load(std::memory_order_acquire));
    });
    view.state->forking.store(false, std::memory_order_release);
  }
}

void Registry::after_fork_in_child() {
  // Written only where they change: each write here is a copy-on-write
  // fault in a forking server's every child. The parent's file stays mapped
  // here (inherited handles point into it), but it is not ours (owns): our
  // own connections get a file of our own.
  ProcessIdMemory::reset_in_child();
  if (reported_full_.load(std::memory_order_relaxed))
    reported_full_.store(false, std::memory_order_relaxed);
  if (own_view_.load(std::memory_order_relaxed) == kCreating)
    own_view_.store(kNoFile, std::memory_order_relaxed);
  for (View& view : views_) {
    if (view.file.mapping == nullptr || view.group_array() == nullptr) continue;
    if (view.state->forking.load(std::memory_order_relaxed))
      view.state->forking.store(false, std::memory_order_relaxed);
    if (view.mine == &view.state->mine_unwiped) view.mine->store(false, std::memory_order_relaxed);
    format::Slot* slots = format::slots_of(view.file.mapping);
    visit_held(view, [&](uint32_t index) {
      const uint32_t count = view.references(index).load(std::memory_order_relaxed);
      if ((count & kForkMark) == 0) return;
      view.references(index).store(count & ~kForkMark, std::memory_order_relaxed);
      format::Slot& slot = slots[index];
      if ((count & ~kForkMark) != 0) join(slot);
      slot.pending_forks.fetch_sub(1, std::memory_order_acq_rel);
      if ((count & ~kForkMark) == 0) free_if_unused(slot, slot.state.load(std::memory_order_acquire));
    });
  }
}

void Registry::release_all(bool ending_now) {
  ErrnoGuard errno_guard;
  // No file of our own is made afterwards, but a forked child that never
  // made one and ends now leaves own_view_ unwritten (registry.h).
  int own = own_view_.load(std::memory_order_acquire);
  if (!ending_now || own < 0 || owns(own))
    own = own_view_.exchange(kUnavailable, std::memory_order_acq_rel);
  for (View& view : views_) {
    if (view.file.mapping == nullptr || view.group_array() == nullptr) continue;
    visit_held(view, [&](uint32_t index) {
      if ((view.references(index).load(std::memory_order_relaxed) & ~kForkMark) == 0) return;
      view.references(index).store(1, std::memory_order_relaxed);
      drop_reference(view, index);
    });
  }
  if (!owns(own)) return;
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
