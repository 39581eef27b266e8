// The records in a receive ring: a 16-byte header and a payload, 8-byte
// aligned, never split across the wrap point.
#pragma once

#include <cstdint>

namespace qpsock::stream {

enum class RecordType : uint8_t {
  padding = 1,     // fills the tail of the ring up to the wrap point
  data = 2,        // stream bytes (the eager path)
  rendezvous = 3,  // a RendezvousDescriptor: the receiver pulls the bytes
};

// RecordHeader::flags
inline constexpr uint8_t kRecordCreditWanted = 1;  // the sender is out of credit after this record

struct RecordHeader {
  uint32_t payload_length;
  RecordType type;
  uint8_t flags;
  uint16_t reserved;
  // The header's own ring offset (monotonic, not wrapped): a header left over
  // from an earlier lap can never pass for a new one.
  uint64_t ring_offset;
};
static_assert(sizeof(RecordHeader) == 16);

// The payload of a rendezvous record: where the receiver reads the bytes from.
struct RendezvousDescriptor {
  uint64_t source_address;
  uint64_t length;
  uint32_t remote_key;
  uint32_t id;  // 28 bits: carried back in rendezvous_done / declined / cancel
};
static_assert(sizeof(RendezvousDescriptor) == 24);

// With RendezvousMethod::write, the receiver asks the sender to write bytes
// of a rendezvous into its buffer: it writes one of these into a slot of the
// sender's request box and notifies rendezvous_write_request(slot); the
// sender writes [source_offset, source_offset + length) of rendezvous `id`
// to `destination_address` and notifies rendezvous_written(slot) with the
// last byte.
struct RendezvousWriteRequest {
  uint64_t destination_address;
  uint64_t source_offset;
  uint64_t length;
  uint32_t destination_key;
  uint32_t id;
};
static_assert(sizeof(RendezvousWriteRequest) == 32);

// The request box: the bytes right after a ring, in the ring's registration
// (so the ring's key reaches it and nothing else), one slot per request.
// A receiver has at most kMostWriteRequestsInFlight unanswered requests and
// uses the slots in turn, so a slot is never reused while its request waits.
inline constexpr uint64_t kRequestBoxSize = 4096;
inline constexpr uint32_t kRequestBoxSlots = kRequestBoxSize / sizeof(RendezvousWriteRequest);
inline constexpr uint32_t kMostWriteRequestsInFlight = 16;
static_assert(kMostWriteRequestsInFlight < kRequestBoxSlots);

inline constexpr uint64_t kRecordAlignment = 8;
inline constexpr uint64_t kRecordHeaderSize = sizeof(RecordHeader);

constexpr uint64_t align_record(uint64_t bytes) {
  return (bytes + kRecordAlignment - 1) & ~(kRecordAlignment - 1);
}
// Ring bytes a record with `payload_length` payload bytes takes.
constexpr uint64_t record_size(uint64_t payload_length) {
  return align_record(kRecordHeaderSize + payload_length);
}
// The smallest record that carries a byte of data.
inline constexpr uint64_t kSmallestDataRecord = record_size(1);
inline constexpr uint64_t kRendezvousRecordSize = record_size(sizeof(RendezvousDescriptor));

}  // namespace qpsock::stream
