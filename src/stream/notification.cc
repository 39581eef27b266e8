#include "stream/notification.h"

namespace qpsock::stream {

uint32_t encode_notification(Notification notification) {
  return (static_cast<uint32_t>(notification.kind) << kNotificationValueBits) |
         (notification.value & kLargestNotificationValue);
}

std::optional<Notification> decode_notification(uint32_t immediate) {
  const uint32_t kind = immediate >> kNotificationValueBits;
  if (kind < static_cast<uint32_t>(NotificationKind::data_arrived) ||
      kind > static_cast<uint32_t>(NotificationKind::room_wanted)) {
    return std::nullopt;
  }
  return Notification{static_cast<NotificationKind>(kind), immediate & kLargestNotificationValue};
}

bool is_counted(NotificationKind kind) {
  return kind != NotificationKind::slots_returned && kind != NotificationKind::end_of_stream;
}

}  // namespace qpsock::stream
