// Record placement and parsing in the receive ring, the immediates, the
// notification window and ring credit: the engine's pure bookkeeping.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "stream/credit_window.h"
#include "stream/notification.h"
#include "stream/notification_window.h"
#include "stream/ring_layout.h"

namespace qpsock::stream {
namespace {

// A writer and a reader over one in-memory ring, the way the engine uses the
// layout (no transport): each record is placed, written and parsed back.
class RingModel {
 public:
  explicit RingModel(uint64_t size) : geometry_(size), ring_(size) {}

  // Writes a data record of up to `payload` bytes (less if the tail or room is
  // short); returns the payload written, 0 if no room.
  uint64_t write(uint64_t payload, uint8_t fill) {
    const RecordPlacement placement = place_record(geometry_, written_, kSmallestDataRecord);
    const uint64_t room = geometry_.size() - (written_ - consumed_);
    if (placement.skipped_bytes + placement.padding_bytes + kSmallestDataRecord > room) return 0;
    if (placement.padding_bytes > 0) {
      const RecordHeader padding = padding_header(geometry_, written_);
      std::memcpy(&ring_[geometry_.position(written_)], &padding, sizeof(padding));
    }
    written_ = placement.record_offset;
    const uint64_t space =
        std::min(placement.contiguous_bytes, room - placement.skipped_bytes - placement.padding_bytes);
    payload = std::min(payload, (space & ~uint64_t{7}) - kRecordHeaderSize);
    const RecordHeader header{static_cast<uint32_t>(payload), RecordType::data, 0, 0, written_};
    std::memcpy(&ring_[geometry_.position(written_)], &header, sizeof(header));
    std::memset(&ring_[geometry_.position(written_) + kRecordHeaderSize], fill, payload);
    written_ += record_size(payload);
    return payload;
  }

  RecordView read() const { return read_record(ring_, geometry_, consumed_, written_); }
  void consume(const RecordView& record) { consumed_ = record.end(); }
  uint64_t written() const { return written_; }
  uint64_t consumed() const { return consumed_; }
  std::vector<std::byte>& bytes() { return ring_; }
  const RingGeometry& geometry() const { return geometry_; }

 private:
  RingGeometry geometry_;
  std::vector<std::byte> ring_;
  uint64_t written_ = 0;
  uint64_t consumed_ = 0;
};

TEST(StreamRingLayout, RecordSizesAreAlignedAndIncludeTheHeader) {
  EXPECT_EQ(record_size(1), 24u);
  EXPECT_EQ(record_size(8), 24u);
  EXPECT_EQ(record_size(9), 32u);
  EXPECT_EQ(kRendezvousRecordSize, 40u);
}

TEST(StreamRingLayout, PlacementFitsPadsOrSkipsTheTail) {
  const RingGeometry geometry(1024);
  const RecordPlacement fits = place_record(geometry, 1000 - 64, 24);
  EXPECT_EQ(fits.record_offset, 1000u - 64);
  EXPECT_EQ(fits.padding_bytes + fits.skipped_bytes, 0u);
  EXPECT_EQ(fits.contiguous_bytes, 1024u - (1000 - 64));

  const RecordPlacement padded = place_record(geometry, 1024 + 1000, 40);  // 24-byte tail
  EXPECT_EQ(padded.padding_bytes, 24u);
  EXPECT_EQ(padded.record_offset, 2048u);
  EXPECT_EQ(padded.contiguous_bytes, 1024u);

  const RecordPlacement skipped = place_record(geometry, 1016, 24);  // 8-byte tail
  EXPECT_EQ(skipped.skipped_bytes, 8u);
  EXPECT_EQ(skipped.padding_bytes, 0u);
  EXPECT_EQ(skipped.record_offset, 1024u);
}

TEST(StreamRingLayout, ManyOddRecordsAcrossManyWrapsReadBackExactly) {
  RingModel ring(4096);
  std::mt19937_64 random(7);
  uint64_t records = 0;
  uint64_t total = 0;
  uint8_t fill = 0;
  while (ring.written() < 200 * 4096) {
    const uint64_t payload = 1 + random() % 700;
    const uint64_t written = ring.write(payload, ++fill);
    ASSERT_GT(written, 0u);
    total += written;
    // Read back everything written so far (the reader keeps up).
    for (;;) {
      const RecordView record = ring.read();
      if (record.status == RecordStatus::incomplete) break;
      ASSERT_EQ(record.status, RecordStatus::complete);
      if (record.header.type == RecordType::data) {
        ++records;
        EXPECT_EQ(record.header.payload_length, written);
        for (uint32_t index = 0; index < record.header.payload_length; ++index)
          ASSERT_EQ(static_cast<uint8_t>(record.payload[index]), fill);
      }
      EXPECT_EQ(ring.geometry().position(record.offset) + record.size <= 4096, true);
      ring.consume(record);
    }
    EXPECT_EQ(ring.consumed(), ring.written());
  }
  EXPECT_GT(records, 1000u);
  EXPECT_GT(total, 100000u);
}

TEST(StreamRingLayout, AWriterThatFillsTheRingStopsUntilTheReaderConsumes) {
  RingModel ring(1024);
  uint64_t filled = 0;
  while (uint64_t written = ring.write(100, 1)) filled += written;
  EXPECT_GT(filled, 700u);
  EXPECT_EQ(ring.write(1, 1), 0u);
  const RecordView first = ring.read();
  ASSERT_EQ(first.status, RecordStatus::complete);
  ring.consume(first);
  EXPECT_GT(ring.write(1, 1), 0u);
}

TEST(StreamRingLayout, AStaleHeaderFromAnEarlierLapIsCorrupt) {
  RingModel ring(1024);
  ring.write(40, 1);
  RecordView record = ring.read();
  ASSERT_EQ(record.status, RecordStatus::complete);
  // Claim the next lap's record is there without writing it.
  record = read_record(ring.bytes(), ring.geometry(), 1024, 1024 + 64);
  EXPECT_EQ(record.status, RecordStatus::corrupt);
}

TEST(StreamRingLayout, AHeaderBeyondTheNotifiedLimitIsIncompleteAndAPartialOneCorrupt) {
  RingModel ring(1024);
  ring.write(100, 1);
  EXPECT_EQ(read_record(ring.bytes(), ring.geometry(), 0, 0).status, RecordStatus::incomplete);
  EXPECT_EQ(read_record(ring.bytes(), ring.geometry(), 0, 32).status, RecordStatus::corrupt);
  EXPECT_EQ(read_record(ring.bytes(), ring.geometry(), 0, ring.written()).status,
            RecordStatus::complete);
}

TEST(StreamRingLayout, AnOversizedLengthIsCorrupt) {
  RingModel ring(1024);
  RecordHeader header{5000, RecordType::data, 0, 0, 0};
  std::memcpy(ring.bytes().data(), &header, sizeof(header));
  EXPECT_EQ(read_record(ring.bytes(), ring.geometry(), 0, 1024).status, RecordStatus::corrupt);
}

TEST(StreamNotification, EncodesAndDecodesEveryKind) {
  for (uint8_t kind = 1; kind <= 7; ++kind) {
    const Notification notification{static_cast<NotificationKind>(kind), kLargestNotificationValue - kind};
    EXPECT_EQ(decode_notification(encode_notification(notification)), notification);
  }
  EXPECT_FALSE(decode_notification(0));
  EXPECT_FALSE(decode_notification(0xf0000000u));
  EXPECT_FALSE(is_counted(NotificationKind::slots_returned));
  EXPECT_FALSE(is_counted(NotificationKind::end_of_stream));
  EXPECT_TRUE(is_counted(NotificationKind::credit));
}

TEST(StreamNotificationWindow, KeepsThreeSlotsInReserveAndReturnsAtHalf) {
  NotificationWindow window(11, 11);  // 8 counted slots
  EXPECT_EQ(window.counted_limit(), 8u);
  for (int sent = 0; sent < 8; ++sent) {
    ASSERT_TRUE(window.can_send_counted());
    window.on_counted_sent();
  }
  EXPECT_FALSE(window.can_send_counted());
  EXPECT_FALSE(window.on_slots_returned(9));
  EXPECT_TRUE(window.on_slots_returned(3));
  EXPECT_TRUE(window.can_send_counted());
  EXPECT_TRUE(window.take_end_of_stream_slot());
  EXPECT_FALSE(window.take_end_of_stream_slot());

  for (int polled = 0; polled < 3; ++polled) window.on_counted_polled();
  EXPECT_EQ(window.slots_to_return(), 0u);
  window.on_counted_polled();
  EXPECT_EQ(window.slots_to_return(), 4u);
  window.on_slots_return_sent(4);
  EXPECT_EQ(window.slots_to_return(), 0u);
}

TEST(StreamNotificationWindow, TheReturnThresholdComesFromOurOwnCapacity) {
  NotificationWindow window(100, 7);  // we hold 7: the peer has 4 counted, returns at 2
  window.on_counted_polled();
  EXPECT_EQ(window.slots_to_return(), 0u);
  window.on_counted_polled();
  EXPECT_EQ(window.slots_to_return(), 2u);
}

TEST(StreamCredit, SenderRoomFollowsCreditAndCompletions) {
  SendCredit credit(1024);
  EXPECT_EQ(credit.room(), 1024u);
  credit.on_written(1000);
  EXPECT_EQ(credit.room(), 24u);
  EXPECT_FALSE(credit.on_credit(1001));
  EXPECT_TRUE(credit.on_credit(600));
  // Consumed, but the staged writes have not completed locally yet.
  EXPECT_EQ(credit.room(), 24u);
  credit.on_write_completed(1000);
  EXPECT_EQ(credit.room(), 624u);
  EXPECT_EQ(credit.credit_limit(), 1624u);
}

TEST(StreamCredit, ReceiverReturnsAtAQuarterOrWhenTheSenderAsks) {
  ReceiveCredit credit(1024);
  credit.on_consumed(255, false);
  EXPECT_EQ(credit.to_return(), 0u);
  credit.on_consumed(1, false);
  EXPECT_EQ(credit.to_return(), 256u);
  credit.on_returned(256);
  EXPECT_EQ(credit.to_return(), 0u);
  credit.on_consumed(24, true);
  EXPECT_EQ(credit.to_return(), 24u);
  credit.on_returned(24);
  credit.on_consumed(24, false);
  EXPECT_EQ(credit.to_return(), 0u);
  EXPECT_EQ(credit.consumed(), 256u + 48u);
}

}  // namespace
}  // namespace qpsock::stream
