#include "stream/eager_sender.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace qpsock::stream {

namespace {

constexpr int kKindShift = 60;
constexpr int kPayloadShift = 32;
constexpr uint64_t kPayloadMask = (uint64_t{1} << 28) - 1;

// Slices carry mutable pointers because reads land in them; a write only reads.
std::byte* source_bytes(const void* address) {
  return static_cast<std::byte*>(const_cast<void*>(address));
}

}  // namespace

uint64_t ring_write_cookie(uint32_t payload_bytes, uint64_t ring_end) {
  return (uint64_t{static_cast<uint8_t>(PostKind::ring_write)} << kKindShift) |
         ((payload_bytes & kPayloadMask) << kPayloadShift) | (ring_end & 0xffffffffu);
}

PostKind post_kind(uint64_t cookie) { return static_cast<PostKind>(cookie >> kKindShift); }

uint32_t cookie_payload_bytes(uint64_t cookie) {
  return static_cast<uint32_t>((cookie >> kPayloadShift) & kPayloadMask);
}

uint64_t cookie_ring_end(uint64_t cookie, uint64_t written) {
  const uint32_t behind = static_cast<uint32_t>(written) - static_cast<uint32_t>(cookie);
  return written - behind;
}

uint64_t plain_cookie(PostKind kind) { return uint64_t{static_cast<uint8_t>(kind)} << kKindShift; }

uint64_t rendezvous_write_cookie(uint32_t id) {
  return plain_cookie(PostKind::rendezvous_write) | (id & kPayloadMask);
}

uint32_t cookie_rendezvous_id(uint64_t cookie) { return static_cast<uint32_t>(cookie & kPayloadMask); }

EagerSender::EagerSender(Transport& transport, RemoteRegion peer_ring, uint64_t peer_ring_size,
                         uint64_t largest_payload)
    : transport_(transport), peer_ring_(peer_ring), geometry_(peer_ring_size),
      largest_payload_(largest_payload) {}

int EagerSender::prepare() {
  if (goes_inline(kRecordHeaderSize + largest_payload_)) return 0;
  if (int error = staging_.map(geometry_.size()); error < 0) return error;
  return transport_.register_memory(staging_.data(), staging_.size(), MemoryAccess::local_only,
                                    staging_registration_);
}

uint64_t EagerSender::make_room(uint64_t smallest, const WriteBudget& budget,
                                WritePlan& plan) const {
  const uint64_t offset = plan.end_offset();
  const RecordPlacement placement = place_record(geometry_, offset, smallest);
  const uint64_t room = budget.ring_room > plan.ring_bytes() ? budget.ring_room - plan.ring_bytes() : 0;
  const uint64_t before_record = placement.skipped_bytes + placement.padding_bytes;
  if (before_record + smallest > room) {
    plan.set_out_of_room();
    return 0;
  }
  const size_t posts_needed = (placement.padding_bytes > 0 ? 1 : 0) + 1;
  const size_t most_posts = std::min<size_t>(budget.posts, WritePlan::kMostWrites);
  if (plan.size() + posts_needed > most_posts) return 0;
  plan.skip(placement.skipped_bytes);
  if (placement.padding_bytes > 0) {
    PlannedWrite& padding = plan.add(placement.padding_bytes);
    padding.header = padding_header(geometry_, offset);
    padding.staged = !goes_inline(kRecordHeaderSize);
    if (padding.staged) plan.count_staged();
  }
  return std::min(placement.contiguous_bytes, room - before_record);
}

void EagerSender::plan_data(IovecCursor& source, uint64_t most_bytes, const WriteBudget& budget,
                            WritePlan& plan) const {
  // One slice carries the header; the rest the payload's pieces.
  const uint32_t most_pieces = std::clamp<uint32_t>(transport_.max_slices(), 2, kMostSlices) - 1;
  const uint64_t end = plan.payload_bytes() + std::min<uint64_t>(most_bytes, source.remaining());
  while (plan.payload_bytes() < end && !plan.full()) {
    const uint64_t space = make_room(kSmallestDataRecord, budget, plan) & ~(kRecordAlignment - 1);
    if (space == 0) return;
    uint64_t payload = std::min<uint64_t>({end - plan.payload_bytes(), largest_payload_,
                                           space - kRecordHeaderSize});
    const bool inline_record = goes_inline(kRecordHeaderSize + payload);
    if (inline_record) {
      // Inline records gather straight from the application's iovecs.
      IovecCursor pieces = source;
      uint64_t covered = 0;
      for (uint32_t piece = 0; piece < most_pieces && covered < payload; ++piece) {
        const uint64_t step = std::min<uint64_t>(pieces.contiguous().length, payload - covered);
        covered += step;
        pieces.advance(step);
      }
      payload = covered;
    }
    PlannedWrite& write = plan.add(record_size(payload));
    write.header = RecordHeader{static_cast<uint32_t>(payload), RecordType::data, 0, 0,
                                write.ring_offset};
    write.source = source;
    write.payload_bytes = static_cast<uint32_t>(payload);
    write.staged = !inline_record;
    if (write.staged) plan.count_staged();
    plan.count_payload(static_cast<uint32_t>(payload));
    source.advance(payload);
  }
}

bool EagerSender::plan_rendezvous(const RendezvousDescriptor& descriptor,
                                  const WriteBudget& budget, WritePlan& plan) const {
  if (plan.full() || make_room(kRendezvousRecordSize, budget, plan) == 0) return false;
  PlannedWrite& write = plan.add(kRendezvousRecordSize);
  write.header = RecordHeader{sizeof(RendezvousDescriptor), RecordType::rendezvous, 0, 0,
                              write.ring_offset};
  write.descriptor = descriptor;
  write.staged = !goes_inline(kRendezvousRecordSize);
  if (write.staged) plan.count_staged();
  return true;
}

void EagerSender::stage(const WritePlan& plan) {
  for (size_t index = 0; index < plan.size(); ++index) {
    const PlannedWrite& write = plan[index];
    if (!write.staged) continue;
    std::byte* into = staging_.data() + geometry_.position(write.ring_offset);
    std::memcpy(into, &write.header, kRecordHeaderSize);
    if (write.header.type == RecordType::data) {
      IovecCursor source = write.source;
      source.gather(into + kRecordHeaderSize, write.payload_bytes);
    } else if (write.header.type == RecordType::rendezvous) {
      std::memcpy(into + kRecordHeaderSize, &write.descriptor, sizeof(write.descriptor));
    }
  }
}

int EagerSender::post(const WritePlan& plan, std::optional<uint32_t> immediate) {
  for (size_t index = 0; index < plan.size(); ++index) {
    const bool last = index + 1 == plan.size();
    if (int error = post_one(plan[index], last ? immediate : std::nullopt); error < 0) return error;
  }
  return 0;
}

uint64_t EagerSender::single_inline_record(uint64_t offset, uint64_t payload) const {
  const uint64_t ring_bytes = record_size(payload);
  if (payload == 0 || payload > largest_payload_ || !goes_inline(kRecordHeaderSize + payload) ||
      geometry_.tail(offset) < ring_bytes)
    return 0;
  return ring_bytes;
}

int EagerSender::post_single_inline_record(uint64_t offset, ByteRange payload,
                                           uint32_t immediate) {
  // Inline: the provider copies the header off the stack as it posts.
  const RecordHeader header{static_cast<uint32_t>(payload.length), RecordType::data, 0, 0, offset};
  const std::array<LocalSlice, 2> slices{{{source_bytes(&header), kRecordHeaderSize, nullptr},
                                          {payload.data, payload.length, nullptr}}};
  const RemoteRegion destination{peer_ring_.address + geometry_.position(offset), peer_ring_.key};
  return transport_.post_write(slices, destination, immediate,
                               ring_write_cookie(static_cast<uint32_t>(payload.length),
                                                 offset + record_size(payload.length)));
}

int EagerSender::post_one(const PlannedWrite& write, std::optional<uint32_t> immediate) {
  std::array<LocalSlice, kMostSlices> slices;
  size_t count = 0;
  if (write.staged) {
    slices[count++] = {staging_.data() + geometry_.position(write.ring_offset),
                       write.posted_bytes(), staging_registration_.get()};
  } else {
    slices[count++] = {source_bytes(&write.header), kRecordHeaderSize, nullptr};
    if (write.header.type == RecordType::data) {
      IovecCursor source = write.source;
      uint64_t left = write.payload_bytes;
      while (left > 0 && count < slices.size()) {
        const ByteRange piece = source.contiguous();
        const uint64_t step = std::min<uint64_t>(piece.length, left);
        slices[count++] = {piece.data, step, nullptr};
        source.advance(step);
        left -= step;
      }
    } else if (write.header.type == RecordType::rendezvous) {
      slices[count++] = {source_bytes(&write.descriptor), sizeof(write.descriptor), nullptr};
    }
  }
  const RemoteRegion destination{peer_ring_.address + geometry_.position(write.ring_offset),
                                 peer_ring_.key};
  return transport_.post_write({slices.data(), count}, destination, immediate,
                               ring_write_cookie(write.payload_bytes,
                                                 write.ring_offset + write.ring_bytes));
}

}  // namespace qpsock::stream
