// Flow control for immediates, so the engine never causes an RNR: every
// immediate takes one of the peer's receive slots (a pre-posted receive on RC,
// an entry of the shm notification queue) until the peer polls it.
//
// Of the peer's C slots (its receive capacity, learned at connect), D = C - 3
// are "counted": data_arrived, credit and the rendezvous notifications take one
// each, and come back when the peer returns them with slots_returned. The peer
// returns them once it has polled at least ceil(D/2) counted notifications (and
// we do the same with the D of our own capacity). Three slots are reserved:
//  - two for slots_returned, which are not counted themselves. At most two can
//    be unpolled at once: a third would mean the peer polled ceil(D/2) + 2 *
//    ceil(D/2) > D of our counted notifications without our having seen a
//    return, and we never have more than D in flight;
//  - one for end_of_stream, sent at most once per connection.
#pragma once

#include <cstdint>

namespace qpsock::stream {

inline constexpr uint32_t kReservedNotificationSlots = 3;
inline constexpr uint32_t kSmallestNotificationCapacity = kReservedNotificationSlots + 1;

class NotificationWindow {
 public:
  // Each capacity: that endpoint's Transport::notification_capacity(); values
  // below kSmallestNotificationCapacity are raised to it (Stream rejects them).
  NotificationWindow(uint32_t peer_capacity, uint32_t local_capacity);

  // Our notifications, in the peer's slots.
  bool can_send_counted() const { return counted_in_flight_ < counted_limit_; }
  void on_counted_sent() { ++counted_in_flight_; }
  // False if the peer returned more than we sent (a protocol error).
  bool on_slots_returned(uint32_t count);
  // The end_of_stream slot, once.
  bool take_end_of_stream_slot();

  // The peer's notifications, in our slots.
  void on_counted_polled() { ++polled_unreturned_; }
  // How many slots to return now: all polled ones once the threshold is met.
  uint32_t slots_to_return() const;
  void on_slots_return_sent(uint32_t count) { polled_unreturned_ -= count; }

  uint32_t counted_limit() const { return counted_limit_; }
  uint32_t counted_in_flight() const { return counted_in_flight_; }

 private:
  uint32_t counted_limit_;     // D of the peer's slots
  uint32_t return_threshold_;  // ceil(D / 2) of ours
  uint32_t counted_in_flight_ = 0;
  uint32_t polled_unreturned_ = 0;
  bool end_of_stream_slot_taken_ = false;
};

}  // namespace qpsock::stream
