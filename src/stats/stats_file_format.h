// The layout of a qpsock statistics file: shared by the library (src/stats),
// which writes it, and qpsock-stat (tools/qpsock-stat), which reads it.
//
// Each process that has a tracked connection owns one file,
// DIR/<pid>-<start time>.qpstat, mapped MAP_SHARED: a FileHeader followed by
// `slot_count` fixed-size Slots. Everything the library changes after
// creation is a lock-free atomic, so a reader in another process sees
// consistent numbers without any lock (the reader copies a slot, then checks
// that its state word did not change meanwhile). Fixed-width fields only, and
// no pointers: the file is read by a different binary.
//
// Header-only and free of qpsock's other code, so the tool can include it alone.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace qpsock::stats::format {

inline constexpr uint64_t kMagic = 0x3154415453505051ull;  // "QPPSTAT1", little-endian
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kDefaultSlotCount = 1u << 16;  // a sparse file: a slot costs memory once used
inline constexpr uint32_t kMaximumSlotCount = 1u << 16;  // the slot index has 16 bits in a handle
inline constexpr const char* kFileSuffix = ".qpstat";
// Where the files go without $QPSOCK_STAT_DIR, in this order: the system's
// directory, then a per-user one (kPerUserPrefix and the uid) under each of
// kPerUserParents. The library takes the first it can write in that is in
// memory; qpsock-stat reads them all.
inline constexpr const char* kSystemDirectory = "/run/qpsock";
inline constexpr const char* kPerUserParents[] = {"/dev/shm", "/tmp"};
inline constexpr const char* kPerUserPrefix = "qpsock-";
// Processes listed per slot: the opener and the children that inherited the socket.
inline constexpr int kUsersPerSlot = 8;

// Which path a connection's bytes take now.
enum class Path : uint8_t {
  pending = 0,  // the config says offload and the upgrade has not settled yet
  kernel = 1,   // kernel TCP
  shm = 2,      // shared memory (same host)
  rdma = 3,     // RDMA queue pair
};

enum class Role : uint8_t { client = 0, server = 1 };

// The low two bits of Slot::state; the bits above are the slot's generation.
enum class SlotState : uint64_t { free = 0, claimed = 1, open = 2 };

inline constexpr uint64_t make_state(uint64_t generation, SlotState state) {
  return generation << 2 | static_cast<uint64_t>(state);
}
inline constexpr SlotState state_of(uint64_t word) { return static_cast<SlotState>(word & 3); }
inline constexpr uint64_t generation_of(uint64_t word) { return word >> 2; }

struct alignas(64) FileHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t header_size;  // sizeof(FileHeader): slots start here
  uint32_t slot_size;    // sizeof(Slot)
  uint32_t slot_count;
  int32_t pid;           // the process that made the file
  uint32_t reserved;
  uint64_t start_time;   // that process's start time, /proc/PID/stat field 22 (clock ticks)
  uint64_t created_ns;   // CLOCK_REALTIME when the file was made
  char program[64];      // /proc/self/comm, else argv[0]'s last component; NUL-terminated
  // Connections not recorded because every slot was in use.
  std::atomic<uint64_t> dropped;
  // Slots [0, used_slots) have ever been claimed: readers need not look further.
  std::atomic<uint32_t> used_slots;
  uint32_t reserved2;
};

// Byte counters, per direction and per path family: kernel TCP, or offloaded
// (shm or rdma). A connection that switches mid-stream has both non-zero.
enum Direction { kSent = 0, kReceived = 1 };
enum PathFamily { kTcp = 0, kOffloaded = 1 };

struct alignas(64) Slot {
  // generation << 2 | SlotState. Freed and reused slots get a new generation,
  // which is how a stale handle (and a reader mid-copy) notices.
  std::atomic<uint64_t> state;
  // bytes[direction][path family]
  std::atomic<uint64_t> bytes[2][2];
  uint64_t opened_ns;                 // CLOCK_REALTIME at open
  std::atomic<uint8_t> path;          // Path
  uint8_t role;                       // Role
  uint16_t local_port, peer_port;     // host byte order
  uint8_t local_family, peer_family;  // AF_INET, AF_INET6 or 0 (unknown)
  uint8_t local_address[16];          // network byte order; IPv4 in the first 4 bytes
  uint8_t peer_address[16];
  // Connections "in flight" into a forked child: the slot is not freed until
  // the child has entered its pid in `users`.
  std::atomic<uint32_t> pending_forks;
  // Pids of the processes that hold the socket (0 = empty entry).
  std::atomic<int32_t> users[kUsersPerSlot];
  // Seqlock over `reason`: odd while a writer changes it.
  std::atomic<uint32_t> reason_sequence;
  char decision[80];                  // what qpsock.conf decided and why; set at open
  char reason[96];                    // why the connection is on `path`; changed with it
  // zero_copy_bytes[direction]: of the offloaded bytes, those that moved
  // zero-copy (rendezvous), counted once each whole write was taken. In
  // what was padding before: files of older libraries read 0 here.
  std::atomic<uint64_t> zero_copy_bytes[2];
};

static_assert(sizeof(FileHeader) % 64 == 0);
static_assert(sizeof(Slot) % 64 == 0);
static_assert(sizeof(Slot) == 320, "the slot's size is part of the file format");

inline constexpr size_t file_size(uint32_t slot_count) {
  return sizeof(FileHeader) + size_t{slot_count} * sizeof(Slot);
}

inline FileHeader* header_of(void* mapping) { return static_cast<FileHeader*>(mapping); }
inline Slot* slots_of(void* mapping) {
  return reinterpret_cast<Slot*>(static_cast<char*>(mapping) + sizeof(FileHeader));
}

// The start time (field 22) in the text of /proc/PID/stat, or 0. The command
// name (field 2) is in parentheses and may itself hold spaces and ')', so
// counting starts after the last ')'.
inline uint64_t parse_start_time(const char* stat_text) {
  const char* cursor = strrchr(stat_text, ')');
  if (cursor == nullptr) return 0;
  ++cursor;
  // After ')' come fields 3, 4, ...: skip 19 of them to reach field 22.
  for (int field = 3; field < 22; ++field) {
    while (*cursor == ' ') ++cursor;
    while (*cursor != ' ' && *cursor != '\0') ++cursor;
    if (*cursor == '\0') return 0;
  }
  return strtoull(cursor, nullptr, 10);
}

// Copies a slot's reason, consistent with itself, into `text` (size >= 1).
// The writer holds reason_sequence odd while it changes the text; a reader
// that overlaps a change tries again, and after a few tries gives up ("").
// Characters are loaded with acquire, pairing with write_reason's release
// stores, so the final sequence check is ordered after them without a fence.
inline void read_reason(const Slot& slot, char* text, size_t size) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const uint32_t before = slot.reason_sequence.load(std::memory_order_acquire);
    if (before & 1) continue;
    size_t length = 0;
    for (; length + 1 < size && length < sizeof(slot.reason); ++length) {
      char c = std::atomic_ref<char>(const_cast<char&>(slot.reason[length])).load(std::memory_order_acquire);
      if (c == '\0') break;
      text[length] = c;
    }
    text[length] = '\0';
    if (slot.reason_sequence.load(std::memory_order_relaxed) == before) return;
  }
  text[0] = '\0';
}

inline const char* path_name(Path path) {
  switch (path) {
    case Path::pending: return "pending";
    case Path::kernel: return "kernel";
    case Path::shm: return "shm";
    case Path::rdma: return "rdma";
  }
  return "unknown";
}

inline const char* role_name(Role role) { return role == Role::client ? "client" : "server"; }

}  // namespace qpsock::stats::format
