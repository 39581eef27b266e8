// Puts records into the peer's receive ring. Small writes are posted inline
// straight from the application's buffer (a header and up to max_slices - 1
// pieces of payload); bigger ones are first copied into a local staging
// buffer that mirrors the peer ring (a record at ring position p is staged at
// p, so ring credit frees staging space too) and posted from there.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "stream/mapped_memory.h"
#include "stream/ring_layout.h"
#include "stream/transport.h"
#include "stream/write_plan.h"

namespace qpsock::stream {

// The cookie of every post, telling its completion what it was.
enum class PostKind : uint8_t { ring_write = 1, notification = 2, read = 3, rendezvous_write = 4 };
uint64_t ring_write_cookie(uint32_t payload_bytes, uint64_t ring_end);
PostKind post_kind(uint64_t cookie);
uint32_t cookie_payload_bytes(uint64_t cookie);
// The ring end of a ring_write cookie, given any offset within 2^31 after it.
uint64_t cookie_ring_end(uint64_t cookie, uint64_t written);
uint64_t plain_cookie(PostKind kind);
// A write of rendezvous `id`'s bytes into the peer's buffer (RendezvousMethod::write).
uint64_t rendezvous_write_cookie(uint32_t id);
uint32_t cookie_rendezvous_id(uint64_t cookie);

class EagerSender {
 public:
  // `peer_ring` and `peer_ring_size`: the peer's receive ring, from connect.
  // `largest_payload`: the eager chunk, at most a quarter of the peer ring.
  EagerSender(Transport& transport, RemoteRegion peer_ring, uint64_t peer_ring_size,
              uint64_t largest_payload);

  // Maps and registers the staging buffer if some records cannot go inline.
  int prepare();

  // Plans data records for up to `most_bytes` of `source`, as far as the
  // budget allows, and advances `source` past them.
  void plan_data(IovecCursor& source, uint64_t most_bytes, const WriteBudget& budget,
                 WritePlan& plan) const;
  // Plans a rendezvous record; false if the budget has no room for it.
  bool plan_rendezvous(const RendezvousDescriptor& descriptor, const WriteBudget& budget,
                       WritePlan& plan) const;
  // Copies staged records into the staging buffer. Needs no lock: the ring
  // space is reserved and only the sending thread touches it.
  void stage(const WritePlan& plan);
  // Posts the planned writes in order, the last one with `immediate`.
  int post(const WritePlan& plan, std::optional<uint32_t> immediate);

  // The common small write, without a plan: `payload` bytes as one inline
  // data record right at ring offset `offset` (no tail to skip or pad
  // first). The record's ring bytes, or 0 when the write is not that case.
  uint64_t single_inline_record(uint64_t offset, uint64_t payload) const;
  // Posts that record straight from the application's bytes.
  int post_single_inline_record(uint64_t offset, ByteRange payload, uint32_t immediate);

  const RingGeometry& geometry() const { return geometry_; }
  uint64_t largest_payload() const { return largest_payload_; }

 private:
  // Makes room for a record of at least `smallest` bytes: skips or pads the
  // tail. Returns the contiguous room for the record, or 0 if out of budget.
  uint64_t make_room(uint64_t smallest, const WriteBudget& budget, WritePlan& plan) const;
  bool goes_inline(uint64_t posted_bytes) const { return posted_bytes <= transport_.max_inline(); }
  int post_one(const PlannedWrite& write, std::optional<uint32_t> immediate);

  Transport& transport_;
  RemoteRegion peer_ring_;
  RingGeometry geometry_;
  uint64_t largest_payload_;
  static constexpr uint32_t kMostSlices = 16;

  MappedMemory staging_;
  std::unique_ptr<MemoryRegistration> staging_registration_;
};

}  // namespace qpsock::stream
