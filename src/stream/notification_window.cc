#include "stream/notification_window.h"

#include <algorithm>

namespace qpsock::stream {

namespace {

uint32_t counted_slots(uint32_t capacity) {
  return std::max(capacity, kSmallestNotificationCapacity) - kReservedNotificationSlots;
}

}  // namespace

NotificationWindow::NotificationWindow(uint32_t peer_capacity, uint32_t local_capacity)
    : counted_limit_(counted_slots(peer_capacity)),
      return_threshold_((counted_slots(local_capacity) + 1) / 2) {}

bool NotificationWindow::on_slots_returned(uint32_t count) {
  if (count > counted_in_flight_) return false;
  counted_in_flight_ -= count;
  return true;
}

bool NotificationWindow::take_end_of_stream_slot() {
  if (end_of_stream_slot_taken_) return false;
  end_of_stream_slot_taken_ = true;
  return true;
}

uint32_t NotificationWindow::slots_to_return() const {
  return polled_unreturned_ >= return_threshold_ ? polled_unreturned_ : 0;
}

}  // namespace qpsock::stream
