// How records sit in a ring of power-of-two size, shared by the writer (which
// places records in the peer's ring) and the reader (which parses its own).
// Offsets are monotonic 64-bit byte counts; position() wraps them.
//
// A record never crosses the wrap point. When the next record does not fit in
// the tail, the writer fills the tail with a padding record, or, when the tail
// is shorter than a header, skips it with no record at all (both sides know).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "stream/record.h"

namespace qpsock::stream {

class RingGeometry {
 public:
  // `size` must be a power of two of at least 64 bytes.
  explicit RingGeometry(uint64_t size) : size_(size) {}

  uint64_t size() const { return size_; }
  uint64_t position(uint64_t offset) const { return offset & (size_ - 1); }
  // Bytes from `offset` to the wrap point.
  uint64_t tail(uint64_t offset) const { return size_ - position(offset); }
  // A tail too short for a header is skipped without a record.
  bool skips_tail(uint64_t offset) const { return tail(offset) < kRecordHeaderSize; }

  static bool valid_size(uint64_t size) { return size >= 64 && (size & (size - 1)) == 0; }

 private:
  uint64_t size_;
};

// Where the writer puts a record that needs `smallest_record` contiguous bytes.
struct RecordPlacement {
  uint64_t skipped_bytes;     // a tail shorter than a header, jumped over
  uint64_t padding_bytes;     // a tail filled by a padding record (0: none)
  uint64_t record_offset;     // where the record's header goes
  uint64_t contiguous_bytes;  // room from record_offset up to the wrap point
};
RecordPlacement place_record(const RingGeometry& geometry, uint64_t offset,
                             uint64_t smallest_record);

// The header of a padding record that fills the tail at `offset`.
RecordHeader padding_header(const RingGeometry& geometry, uint64_t offset);

enum class RecordStatus : uint8_t {
  complete,    // a whole, valid record lies before the limit
  incomplete,  // nothing (more) has been notified yet
  corrupt,     // a header that cannot be right: a protocol error
};

struct RecordView {
  RecordStatus status = RecordStatus::incomplete;
  uint64_t skipped_bytes = 0;  // an implicitly skipped tail before the header
  uint64_t offset = 0;         // the header's offset
  RecordHeader header{};
  const std::byte* payload = nullptr;
  uint64_t size = 0;           // header + payload + alignment

  // Ring offset just past the record (and the skipped tail before it).
  uint64_t end() const { return offset + size; }
  // Ring bytes consuming this record frees (skipped tail included).
  uint64_t ring_bytes() const { return skipped_bytes + size; }
};

// Parses the record at `offset` of `ring`, if it ends at or before `limit`
// (the notified offset).
RecordView read_record(std::span<const std::byte> ring, const RingGeometry& geometry,
                       uint64_t offset, uint64_t limit);

}  // namespace qpsock::stream
