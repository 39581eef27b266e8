// The shared state behind a pair of LoopbackTransports: both ends'
// registrations, completion queues and eventfds, under one mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>

#include "stream/loopback_transport.h"

namespace qpsock::stream {

class LoopbackLink : public std::enable_shared_from_this<LoopbackLink> {
 public:
  explicit LoopbackLink(const LoopbackOptions& options) : options_(options) {}
  ~LoopbackLink();
  LoopbackLink(const LoopbackLink&) = delete;
  LoopbackLink& operator=(const LoopbackLink&) = delete;

  int open_event_fds();
  const LoopbackOptions& options() const { return options_; }

  int register_memory(int side, void* address, size_t length, MemoryAccess access,
                      std::unique_ptr<MemoryRegistration>& registration);
  void deregister(int side, uint32_t key);

  int post_write(int side, std::span<const LocalSlice> source, RemoteRegion destination,
                 std::optional<uint32_t> immediate, uint64_t cookie);
  int post_read(int side, std::span<const LocalSlice> destination, RemoteRegion source,
                uint64_t cookie);
  int poll(int side, std::span<Completion> completions);
  int event_fd(int side) const { return ends_[side].event_fd; }
  int arm(int side);

  void inject(int side, const LoopbackFaults& faults);
  void break_link();
  bool broken() const;
  LoopbackStatistics statistics(int side) const;

 private:
  struct Region {
    std::byte* address;
    size_t length;
    MemoryAccess access;
  };
  struct End {
    std::map<uint32_t, Region> regions;  // by key
    std::deque<Completion> completions;
    uint32_t unpolled_arrivals = 0;
    uint32_t posts_outstanding = 0;
    int event_fd = -1;
    bool armed = false;
    std::optional<uint64_t> posts_until_failure;
    std::optional<uint64_t> completions_until_failure;
    LoopbackStatistics statistics;
  };

  // Checks the post limits and counts the post; 0 or -errno (nothing happens).
  int admit_post(End& end, size_t slice_count);
  // Whether this end's next completion is the injected failure.
  bool completion_fails(End& end);
  const Region* find_region(const End& end, uint32_t key, const void* address, size_t length,
                            std::optional<MemoryAccess> access) const;
  bool local_slices_registered(const End& end, std::span<const LocalSlice> slices) const;
  void complete(End& end, Completion completion);
  void break_link_locked();

  LoopbackOptions options_;
  mutable std::mutex mutex_;
  End ends_[2];
  uint32_t next_key_ = 1;
  bool broken_ = false;
};

}  // namespace qpsock::stream
