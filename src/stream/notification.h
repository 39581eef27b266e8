// The 32-bit immediates the two engines exchange: a 4-bit kind and a 28-bit
// value. Ring byte counts travel in 8-byte units (every record is 8-byte
// aligned), so one notification can cover up to 2 GiB of ring.
#pragma once

#include <cstdint>
#include <optional>

namespace qpsock::stream {

enum class NotificationKind : uint8_t {
  data_arrived = 1,         // value: ring units the sender wrote since its last data_arrived
  credit = 2,               // value: ring units the receiver consumed since its last credit
  slots_returned = 3,       // value: counted notifications the receiver polled (see NotificationWindow)
  rendezvous_done = 4,      // value: rendezvous id; the receiver took every byte (read method only)
  rendezvous_declined = 5,  // value: rendezvous id; cancelled before any byte was taken
  rendezvous_cancel = 6,    // value: rendezvous id; the sender was interrupted and asks to cancel
  end_of_stream = 7,        // value: 0; the sender shut down its direction after everything before
  reader_gone = 8,          // value: 0; the sender shut down both directions: data sent to it resets
  // RendezvousMethod::write (record.h, RendezvousWriteRequest):
  rendezvous_write_request = 9,  // value: request box slot; the receiver asks for bytes
  rendezvous_written = 10,       // value: request box slot; the bytes it asked for landed
  // value 1: the sender holds bytes our ring has no room for (its send
  // backlog) and its application may not call in: return credit at once,
  // and ring its doorbell with it (stream/control_doorbell.h). Value 0: it
  // holds none any more (after the last of them). A peer whose process
  // ends while it holds bytes did not end in order: they are lost.
  room_wanted = 11,
};

inline constexpr uint32_t kNotificationValueBits = 28;
inline constexpr uint32_t kLargestNotificationValue = (uint32_t{1} << kNotificationValueBits) - 1;
inline constexpr uint64_t kRingUnit = 8;

struct Notification {
  NotificationKind kind;
  uint32_t value;

  bool operator==(const Notification&) const = default;
};

// `value` must be at most kLargestNotificationValue.
uint32_t encode_notification(Notification notification);
// Empty for an unknown kind (a protocol error: the connection is broken).
std::optional<Notification> decode_notification(uint32_t immediate);

// Whether a notification of this kind takes one of the peer's counted receive
// slots (NotificationWindow); slot returns and end-of-stream use reserved ones.
bool is_counted(NotificationKind kind);

}  // namespace qpsock::stream
