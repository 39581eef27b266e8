// Two in-process transports connected to each other: writes and reads are
// memcpy between registered regions, completions are queued, the wait handle
// is an eventfd. The reference transport for tests, and the model the shm
// transport follows (a ring of immediates and an eventfd per side).
//
// It checks what a real RC queue pair would: keys and bounds of every remote
// access, registration of non-inline local slices, the send queue depth, and
// the receiver's notification capacity (one immediate too many is an RNR
// error). Any such violation breaks the link, as it would break a QP.
//
// Fault injection: fail the Nth post, fail every completion after N, drop the
// link (later posts complete with errors; both sides get an error completion).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "stream/transport.h"

namespace qpsock::stream {

struct LoopbackOptions {
  size_t max_inline = 256;
  uint32_t max_outstanding_reads = 16;
  uint32_t send_queue_depth = 128;
  uint32_t notification_capacity = 256;
  uint32_t max_slices = 8;
  // A longer read is a violation (the engine must split its pulls).
  uint64_t max_read_length = uint64_t{1} << 30;
};

struct LoopbackFaults {
  // The Nth post from now (1-based, writes and reads) returns -EIO with no effect.
  std::optional<uint64_t> fail_post_number;
  // After N more successful completions at this end, the next operation fails
  // with an error completion and breaks the link.
  std::optional<uint64_t> fail_completions_after;
};

struct LoopbackStatistics {
  uint64_t writes = 0;
  uint64_t inline_writes = 0;
  uint64_t reads = 0;
  uint64_t immediates_sent = 0;
  uint64_t bytes_written = 0;
  uint64_t bytes_read = 0;
};

class LoopbackLink;

class LoopbackTransport final : public Transport {
 public:
  // Creates two connected ends; 0 or -errno (no eventfd).
  static int make_pair(const LoopbackOptions& options, std::unique_ptr<LoopbackTransport>& first,
                       std::unique_ptr<LoopbackTransport>& second);

  LoopbackTransport(std::shared_ptr<LoopbackLink> link, int side);
  ~LoopbackTransport() override;
  LoopbackTransport(const LoopbackTransport&) = delete;
  LoopbackTransport& operator=(const LoopbackTransport&) = delete;

  int register_memory(void* address, size_t length, MemoryAccess access,
                      std::unique_ptr<MemoryRegistration>& registration) override;
  int post_write(std::span<const LocalSlice> source, RemoteRegion destination,
                 std::optional<uint32_t> immediate, uint64_t cookie) override;
  int post_read(std::span<const LocalSlice> destination, RemoteRegion source,
                uint64_t cookie) override;
  int poll(std::span<Completion> completions) override;
  int wait_handle() const override;
  int arm() override;
  void disconnect() override;
  size_t max_inline() const override;
  uint32_t max_outstanding_reads() const override;
  uint32_t send_queue_depth() const override;
  uint32_t notification_capacity() const override;
  uint32_t max_slices() const override;
  uint64_t max_read_length() const override;

  void inject(const LoopbackFaults& faults);
  // The peer vanishes: every later post and the pending receive slots fail.
  void drop_link();
  // The other end left the link (as an rdma_cm disconnect request from a
  // peer whose process ended would say): peer_left() is true from here, and
  // the link drops.
  void peer_leaves();
  bool peer_left() const override { return peer_left_.load(std::memory_order_acquire); }
  bool link_broken() const;
  LoopbackStatistics statistics() const;

 private:
  std::shared_ptr<LoopbackLink> link_;
  int side_;
  std::atomic<bool> peer_left_{false};
};

}  // namespace qpsock::stream
