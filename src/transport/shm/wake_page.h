// The page through which a peer process says which of our channels it woke:
// one bit per channel slot of the link, and a summary bit per word of them,
// in a sealed memfd we create and the peer maps. The peer sets a channel's
// bit and then its word's summary bit, and rings our doorbell; we clear a
// summary bit before the word's bits, so a bit set after our look comes
// with a doorbell of its own. Bits are all a peer can write here, and a
// bad one only wakes our channels for nothing. (A peer on this host has the
// ptrace rights that process_vm_readv needs over us anyway: shared memory
// trusts it further than this page.)
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/unique_fd.h"
#include "stream/function_ref.h"
#include "stream/mapped_memory.h"

namespace qpsock::transport::shm {

// Channels one link can carry at once.
inline constexpr uint32_t kLinkChannels = 1u << 16;

struct WakeBits {
  static constexpr uint32_t kWords = kLinkChannels / 64;
  static constexpr uint32_t kSummaryWords = kWords / 64;
  std::atomic<uint64_t> summary[kSummaryWords];  // bit w % 64 of word w / 64: words[w] may be set
  std::atomic<uint64_t> words[kWords];           // bit s % 64 of word s / 64: slot s was woken
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// The page's size in the memfd (whole pages).
size_t wake_page_size();

// Ours: the memfd the peer is given, and our mapping of it.
class OwnWakePage {
 public:
  // Creates, seals and maps it; 0 or -errno.
  int create();
  int fd() const { return memfd_.get(); }
  WakeBits& bits() const { return *reinterpret_cast<WakeBits*>(memory_.data()); }
  // Calls `woken(slot)` for every slot marked since the last call, clearing
  // each bit before the call.
  void take_marked(stream::FunctionRef<void(uint32_t)> woken);

 private:
  UniqueFd memfd_;  // kept: every hello carries it
  stream::MappedMemory memory_;
};

// Sets `slot`'s bit, then its summary bit (seq_cst: before the doorbell).
void mark_woken(WakeBits& bits, uint32_t slot);

// Maps a peer's wake page from its memfd (which the caller still owns):
// sealed against shrinking and at least wake_page_size(); 0 or -errno
// (-EPROTO: not a wake page).
int map_peer_wake_page(int fd, stream::MappedMemory& memory);

}  // namespace qpsock::transport::shm
