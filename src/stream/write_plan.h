// The ring writes one send step will post: planned under the stream's lock
// (which reserves their ring space and send-queue slots), staged without it,
// posted under it again, in ring order.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "stream/iovec_cursor.h"
#include "stream/record.h"

namespace qpsock::stream {

struct PlannedWrite {
  uint64_t ring_offset = 0;  // where the header goes (monotonic)
  uint64_t ring_bytes = 0;   // ring bytes the write occupies, alignment included
  RecordHeader header{};
  // Data records: where the payload comes from. Rendezvous records: unused.
  IovecCursor source{{}};
  uint32_t payload_bytes = 0;          // stream bytes carried (data records)
  RendezvousDescriptor descriptor{};   // rendezvous records
  bool staged = false;                 // copied into the staging buffer, posted from there

  // Bytes actually posted: the header and the payload (not the alignment).
  uint64_t posted_bytes() const {
    return kRecordHeaderSize + (header.type == RecordType::padding ? 0 : header.payload_length);
  }
};

// What a step may use.
struct WriteBudget {
  uint64_t ring_room;  // SendCredit::room()
  uint32_t posts;      // free send-queue slots
};

class WritePlan {
 public:
  static constexpr size_t kMostWrites = 32;

  explicit WritePlan(uint64_t start_offset) : start_offset_(start_offset), end_offset_(start_offset) {}

  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  bool full() const { return count_ == kMostWrites; }
  PlannedWrite& operator[](size_t index) { return slots_[index].write; }
  const PlannedWrite& operator[](size_t index) const { return slots_[index].write; }
  PlannedWrite& back() { return slots_[count_ - 1].write; }

  // Offsets: where the step starts, and where the next write would go.
  uint64_t start_offset() const { return start_offset_; }
  uint64_t end_offset() const { return end_offset_; }
  uint64_t ring_bytes() const { return end_offset_ - start_offset_; }
  uint64_t payload_bytes() const { return payload_bytes_; }
  bool needs_staging() const { return staged_count_ > 0; }
  // The step stopped short of its source for want of ring room (the last
  // record then asks the receiver for credit at once).
  bool out_of_room() const { return out_of_room_; }

  void skip(uint64_t bytes) { end_offset_ += bytes; }
  PlannedWrite& add(uint64_t ring_bytes);
  void set_out_of_room() { out_of_room_ = true; }
  void count_payload(uint32_t bytes) { payload_bytes_ += bytes; }
  void count_staged() { ++staged_count_; }

 private:
  // A slot's write is constructed when add() takes it. Every send makes a
  // plan and most use one or two of its 32 writes: constructing all of them
  // up front was a third of the engine's instructions for a small message.
  union Slot {
    Slot() {}
    PlannedWrite write;
  };
  static_assert(std::is_trivially_destructible_v<PlannedWrite>);
  std::array<Slot, kMostWrites> slots_;
  size_t count_ = 0;
  size_t staged_count_ = 0;
  uint64_t start_offset_;
  uint64_t end_offset_;
  uint64_t payload_bytes_ = 0;
  bool out_of_room_ = false;
};

inline PlannedWrite& WritePlan::add(uint64_t ring_bytes) {
  PlannedWrite& write = *std::construct_at(&slots_[count_++].write);
  write.ring_offset = end_offset_;
  write.ring_bytes = ring_bytes;
  end_offset_ += ring_bytes;
  return write;
}

}  // namespace qpsock::stream
