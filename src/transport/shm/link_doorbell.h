// The wakeups of a link: one doorbell per pair of processes, not an eventfd
// per connection. Each process has an OwnDoorbell per peer process (an
// eventfd the background loop watches, and a wake page, wake_page.h), and
// holds the peer's as a PeerDoorbell. A channel (a ShmTransport) has a slot
// in its process's table; to wake it, the peer marks the slot in the page
// and rings the doorbell; our loop then tells the slot's WakeupListener (the
// stream, which wakes its sleeping threads and epoll sets). So a connection
// holds no descriptor. A thread sleeping alone on a stream is woken without
// that hop: the peer writes its waker itself (wakeup.h).
//
// Lock order: the table's lock is held while a listener runs, and a
// listener takes its stream's state lock: no channel may be added, named or
// removed under a stream's state lock.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/background_loop.h"
#include "common/unique_fd.h"
#include "stream/function_ref.h"
#include "stream/mapped_memory.h"
#include "stream/transport.h"
#include "transport/shm/wake_page.h"

namespace qpsock::transport::shm {

// Where a wakeup goes: a wake page's bits and the eventfd its owner watches.
struct DoorbellTarget {
  WakeBits* bits = nullptr;
  int doorbell_fd = -1;
};
// Marks `slot` and rings the doorbell (an eventfd write; the reader drains).
void ring_doorbell(const DoorbellTarget& target, uint32_t slot);
// Rings it for no channel: a message in the link's mailbox (link_mailbox.h).
void ring_link_doorbell(const DoorbellTarget& target);

// Whether a write to `fd` (one a peer gave us) never blocks, and, where
// /proc tells, whether it is an eventfd.
bool non_blocking_eventfd(int fd);

class OwnDoorbell {
 public:
  OwnDoorbell() = default;
  ~OwnDoorbell();
  OwnDoorbell(const OwnDoorbell&) = delete;
  OwnDoorbell& operator=(const OwnDoorbell&) = delete;

  // The eventfd and wake page, the eventfd watched edge-triggered to call
  // `callback(tag, ...)`, which calls dispatch(); 0 or -errno.
  int open(BackgroundCallback callback, uint64_t tag);

  // Told to the peer in every hello, with the two fds: the peer keeps one
  // copy per link id.
  uint64_t link_id() const { return link_id_; }
  int doorbell_fd() const { return doorbell_.get(); }
  int page_fd() const { return page_.fd(); }
  // For our own threads' wakeups of our channels.
  DoorbellTarget target() const { return {&page_.bits(), doorbell_.get()}; }

  // A free slot for a new channel, its listener not yet set; -ENOSPC when
  // the link carries kLinkChannels already.
  int64_t add_channel();
  // Sets the slot's listener (null: none), waiting for a call of the old one
  // in progress on the loop.
  void set_listener(uint32_t slot, stream::WakeupListener* listener);
  void remove_channel(uint32_t slot);

  // On the loop's thread: drains the doorbell, then tells the listener of
  // every marked slot.
  void dispatch();

 private:
  struct Channel {
    bool used = false;
    stream::WakeupListener* listener = nullptr;
  };

  uint64_t link_id_ = 0;
  UniqueFd doorbell_;
  OwnWakePage page_;
  std::mutex table_mutex_;  // held while a listener is told
  std::vector<Channel> channels_;
  std::vector<uint32_t> free_slots_;
};

class PeerDoorbell {
 public:
  // Takes the peer's doorbell eventfd (which must be one, non-blocking: we
  // write it from any thread) and maps its wake page; 0 or -errno (-EPROTO:
  // not what a peer should send).
  int attach(uint64_t link_id, UniqueFd doorbell, int page_fd);
  uint64_t link_id() const { return link_id_; }
  DoorbellTarget target() const {
    return {reinterpret_cast<WakeBits*>(page_.data()), doorbell_.get()};
  }

  // The eventfd that a waiter word of this link names by its number in the
  // peer (a sleeping thread's waker, wakeup.h), taken once with
  // pidfd_getfd(2) from `pidfd` and kept; -1 if it cannot be had (no
  // permission, not a non-blocking eventfd, kMostSleeperFds kept already):
  // then the doorbell rings. `same_image()` must say, before and after the
  // taking, that the process still runs the image this link was made with:
  // after an exec the number may be any file of the new program's.
  int sleeper_fd(int pidfd, uint32_t number, stream::FunctionRef<bool()> same_image);
  static constexpr size_t kMostSleeperFds = 64;

 private:
  struct SleeperFd {
    uint32_t number;
    UniqueFd fd;  // invalid: refused
  };

  uint64_t link_id_ = 0;
  UniqueFd doorbell_;
  stream::MappedMemory page_;
  std::mutex sleeper_fds_mutex_;
  std::vector<SleeperFd> sleeper_fds_;
};

}  // namespace qpsock::transport::shm
