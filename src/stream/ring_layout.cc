#include "stream/ring_layout.h"

#include <cstring>

namespace qpsock::stream {

RecordPlacement place_record(const RingGeometry& geometry, uint64_t offset,
                             uint64_t smallest_record) {
  const uint64_t tail = geometry.tail(offset);
  if (tail >= smallest_record) return {0, 0, offset, tail};
  if (tail < kRecordHeaderSize) return {tail, 0, offset + tail, geometry.size()};
  return {0, tail, offset + tail, geometry.size()};
}

RecordHeader padding_header(const RingGeometry& geometry, uint64_t offset) {
  return RecordHeader{static_cast<uint32_t>(geometry.tail(offset) - kRecordHeaderSize),
                      RecordType::padding, 0, 0, offset};
}

namespace {

bool payload_length_fits(const RecordHeader& header, uint64_t tail) {
  switch (header.type) {
    case RecordType::padding:
      return kRecordHeaderSize + header.payload_length == tail;
    case RecordType::data:
      return header.payload_length > 0 && record_size(header.payload_length) <= tail;
    case RecordType::rendezvous:
      return header.payload_length == sizeof(RendezvousDescriptor) &&
             kRendezvousRecordSize <= tail;
  }
  return false;
}

}  // namespace

RecordView read_record(std::span<const std::byte> ring, const RingGeometry& geometry,
                       uint64_t offset, uint64_t limit) {
  RecordView view;
  if (geometry.skips_tail(offset)) {
    view.skipped_bytes = geometry.tail(offset);
    offset += view.skipped_bytes;
  }
  view.offset = offset;
  if (limit < offset + kRecordHeaderSize) return view;  // incomplete
  std::memcpy(&view.header, ring.data() + geometry.position(offset), sizeof(RecordHeader));
  if (view.header.ring_offset != offset ||
      !payload_length_fits(view.header, geometry.tail(offset))) {
    view.status = RecordStatus::corrupt;
    return view;
  }
  view.size = view.header.type == RecordType::padding ? geometry.tail(offset)
                                                      : record_size(view.header.payload_length);
  if (limit < offset + view.size) {
    // The notifications cover whole records; a partial one is a protocol error.
    view.status = RecordStatus::corrupt;
    return view;
  }
  view.payload = ring.data() + geometry.position(offset) + kRecordHeaderSize;
  view.status = RecordStatus::complete;
  return view;
}

}  // namespace qpsock::stream
