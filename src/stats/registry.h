// The statistics registry: one process's view of the statistics files it
// writes to (stats_file_format.h). Lock-free and allocation-free after the
// file exists, so the interposer may call it from any thread and from signal
// handlers; errno is left alone.
//
// Handles. A connection is named by a Handle: which file ("view"), which
// slot, and the slot's generation when it was opened. A slot that has been
// freed and reused has a new generation, so a stale handle (an fd closed by
// another thread mid-call) finds nothing instead of corrupting another
// connection's numbers. 0 is never a valid handle: "not recorded".
//
// References. Each fd of this process that refers to the connection holds a
// reference (open gives the first, dup adds one, close drops one). The
// counts are private to the process; the shared slot lists the pids of the
// processes holding it. The slot is freed when the last process lets go.
//
// fork. The child inherits the parent's sockets and its mappings, and so its
// handles: bytes the child moves on an inherited connection are counted in
// the parent's file, in the same row, and the child's pid joins the row's
// users. Connections the child opens itself go to a file of its own, made on
// first use. Between fork and the child entering its pid, the parent marks
// the slots "in flight" (pending_forks), so a parent that closes its copy at
// once (a forking server) cannot free the row under the child. No lock is
// held across fork.
//
// exec and exit. A process that execs or exits lets go of every connection
// (the new program image starts with no records); its file is removed unless
// a child still uses a row in it, in which case qpsock-stat removes it once
// every user is gone.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>

#include "stats/stats_file.h"
#include "stats/stats_file_format.h"

namespace qpsock::stats {

using format::Path;
using format::Role;
using Handle = uint64_t;

enum class Direction { sent = format::kSent, received = format::kReceived };

class Registry {
 public:
  // The process's registry: the runtime directory and the default slot count.
  constexpr Registry() = default;
  // A registry writing into `directory` with `slot_count` slots (tests).
  Registry(const char* directory, uint32_t slot_count);
  // Lets go of every connection and unmaps what this object mapped (tests;
  // the process's registry is never destroyed).
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Records a new connection; 0 when it cannot (no directory, table full).
  // `decision` says what the configuration decided, `reason` why the
  // connection is on `path`; both are truncated to fit.
  Handle open(const sockaddr* local, const sockaddr* peer, Role role, Path path,
              const char* decision, const char* reason);
  // The connection is on `path` now, because of `reason`.
  void set_path(Handle handle, Path path, const char* reason);
  // set_path only if the connection is still pending; true if it changed.
  bool settle_pending(Handle handle, Path path, const char* reason);
  // The current path; Path::kernel for a handle that is no longer valid.
  Path path(Handle handle) const;
  // Bytes moved over `path` (kernel: TCP; shm or rdma: offloaded).
  void add_bytes(Handle handle, Direction direction, Path path, uint64_t bytes) {
    if (format::Slot* slot = find(handle)) [[likely]] {
      const int family = path == Path::kernel || path == Path::pending ? format::kTcp : format::kOffloaded;
      slot->bytes[static_cast<int>(direction)][family].fetch_add(bytes, std::memory_order_relaxed);
    }
  }
  // Offloaded bytes (already counted by add_bytes) that moved zero-copy.
  void add_zero_copy(Handle handle, Direction direction, uint64_t bytes) {
    if (format::Slot* slot = find(handle)) [[likely]]
      slot->zero_copy_bytes[static_cast<int>(direction)].fetch_add(bytes, std::memory_order_relaxed);
  }
  // Another fd of this process refers to the connection (dup).
  void add_reference(Handle handle);
  // One fd of this process no longer does (close); the last one frees the slot.
  void close(Handle handle);

  // fork(2), around the real call, from the fork wrapper.
  void before_fork();
  void after_fork_in_parent(bool fork_failed);
  void after_fork_in_child();
  // exec and exit: lets go of everything; removes this process's file unless
  // another process still uses a row in it. No new file is made afterwards,
  // except, with `ending_now` (_exit: nothing of the image runs after it), in
  // a forked child that never made one: marking that would be a
  // copy-on-write fault in each child of a forking server.
  void release_all(bool ending_now = false);

  // This process's own file ("" until it exists) and its header (null until then).
  const char* file_path() const;
  const format::FileHeader* header() const;
  // The slot behind a valid handle, else null (qpsock-stat's tests; the hot path).
  format::Slot* find(Handle handle) const {
    const uint64_t view_plus_one = handle >> 61;
    if (view_plus_one == 0) return nullptr;
    const View& view = views_[view_plus_one - 1];
    void* mapping = view.file.mapping;
    const uint32_t index = static_cast<uint32_t>(handle >> 32) & 0xffff;
    if (mapping == nullptr || index >= view.slot_count) return nullptr;
    format::Slot* slot = &format::slots_of(mapping)[index];
    const uint64_t state = slot->state.load(std::memory_order_acquire);
    if (format::state_of(state) != format::SlotState::open ||
        static_cast<uint32_t>(format::generation_of(state)) != static_cast<uint32_t>(handle)) {
      return nullptr;
    }
    return slot;
  }

 private:
  // A handle keeps view + 1 in its top three bits.
  static constexpr int kViews = 7;
  // own_view_ values other than a view index.
  static constexpr int kNoFile = -1, kCreating = -2, kUnavailable = -3;
  // Bit of a local reference count: the slot is marked in flight to a fork child.
  static constexpr uint32_t kForkMark = 1u << 31;

  // A view's state in this process, at the start of its private memory,
  // on the page that the first slots' groups share: a process whose
  // connections keep to a few slots writes that one page.
  struct ViewState {
    std::atomic<uint32_t> cursor;     // where an open looks first: the slot this process freed last
    std::atomic<bool> forking;        // before_fork marked this view's slots
    // A visit is under way that may take down the bits of empty held groups:
    // another visit meanwhile reads every group instead (a child inherits it).
    std::atomic<bool> visiting;
    std::atomic<bool> mine_unwiped;   // `mine` where no wiped memory can be had
  };
  // 64 slots' references and the bit per slot set while this process may
  // hold references to it: fork and exit visit only these, not every slot
  // (a forking server forks at each connection).
  struct SlotGroup {
    std::atomic<uint64_t> held;
    std::atomic<uint32_t> references[64];
  };

  struct View {
    StatsFile file;      // mapping set once, before own_view_ publishes it
    uint32_t slot_count = 0;
    // Private memory (a child gets a copy): the state, a bit per group that
    // may have a held bit set (a visit reads a few words however many slots
    // the file has), then the groups.
    ViewState* state = nullptr;
    std::atomic<uint64_t>* held_groups = nullptr;
    // Set in the process that made the file, false in a forked child: in
    // memory the child finds zeroed (common/wiped_on_fork.h), or else
    // state->mine_unwiped, which the child clears.
    std::atomic<bool>* mine = nullptr;
    // Set last (release): the fork steps look at a view once it is.
    std::atomic<SlotGroup*> groups{nullptr};

    SlotGroup* group_array() const { return groups.load(std::memory_order_acquire); }
    std::atomic<uint32_t>& references(uint32_t index) const {
      return group_array()[index / 64].references[index % 64];
    }
    std::atomic<uint64_t>& held(uint32_t group) const { return group_array()[group].held; }
    void set_held(uint32_t index) const;
    void clear_held(uint32_t index) const;
  };

  // The bytes of a view's private memory for `slot_count` slots.
  static size_t private_bytes(uint32_t slot_count);

  int own_view();
  // Makes this process's file, if own_view_ still holds `expected`.
  int create_own_view(int expected);
  // Whether `view` is this process's own file (not one inherited across fork).
  bool owns(int view) const;
  void join(format::Slot& slot);
  void leave(format::Slot& slot, uint64_t state);
  // Frees the slot if no process uses it and no fork child is entering it.
  void free_if_unused(format::Slot& slot, uint64_t state);
  void drop_reference(View& view, uint32_t index);
  // Calls visit(index) for each slot of `view` whose bit in `held` is set.
  template <typename Visit>
  void visit_held(const View& view, Visit visit);

  // The view of this process's file (Registry::owns), or one of the values above.
  std::atomic<int> own_view_{kNoFile};
  std::atomic<bool> reported_full_{false};
  View views_[kViews];
  const char* directory_ = nullptr;  // null: the runtime directory
  uint32_t slot_count_ = format::kDefaultSlotCount;
};

// A handle's parts (tests).
inline uint32_t handle_index(Handle handle) { return static_cast<uint32_t>(handle >> 32) & 0xffff; }

}  // namespace qpsock::stats
