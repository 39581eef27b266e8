#include "stream/rendezvous_sender.h"

#include <algorithm>

#include "stream/notification.h"

namespace qpsock::stream {

RendezvousDescriptor RendezvousSender::start(const void* source, uint64_t length,
                                             const RegistrationLease& lease) {
  const uint32_t id = next_id_;
  next_id_ = next_id_ == kLargestNotificationValue ? 1 : next_id_ + 1;
  // Slices carry mutable pointers because reads land in them; a write only reads.
  auto* bytes = static_cast<std::byte*>(const_cast<void*>(source));
  entries_.push_back({id, bytes, length, lease.get()});
  return RendezvousDescriptor{reinterpret_cast<uint64_t>(source), length, lease->remote_key(), id};
}

RendezvousSender::Entry* RendezvousSender::find(uint32_t id) {
  auto found = std::find_if(entries_.begin(), entries_.end(),
                            [id](const Entry& entry) { return entry.id == id; });
  return found == entries_.end() ? nullptr : &*found;
}

const RendezvousSender::Entry* RendezvousSender::find(uint32_t id) const {
  return const_cast<RendezvousSender*>(this)->find(id);
}

bool RendezvousSender::on_answer(uint32_t id, RendezvousOutcome outcome) {
  Entry* entry = find(id);
  if (entry == nullptr || entry->outcome != RendezvousOutcome::pending) return false;
  entry->outcome = outcome;
  return true;
}

RendezvousOutcome RendezvousSender::outcome(uint32_t id) const {
  const Entry* entry = find(id);
  return entry == nullptr ? RendezvousOutcome::pending : entry->outcome;
}

bool RendezvousSender::settled(uint32_t id) const {
  const Entry* entry = find(id);
  return entry == nullptr ||
         (entry->outcome != RendezvousOutcome::pending && entry->writes_in_flight == 0);
}

bool RendezvousSender::begun(uint32_t id) const {
  const Entry* entry = find(id);
  return entry != nullptr && entry->requested > 0;
}

std::optional<LocalSlice> RendezvousSender::accept_write_request(uint32_t id, uint64_t offset,
                                                                 uint64_t length) {
  Entry* entry = find(id);
  // The receiver asks for the bytes in order, each once: what it asked for
  // so far is a prefix, and all of it asked for and written is all delivered.
  if (entry == nullptr || entry->outcome != RendezvousOutcome::pending || length == 0 ||
      offset != entry->requested || length > entry->length - offset)
    return std::nullopt;
  entry->requested += length;
  ++entry->writes_in_flight;
  return LocalSlice{entry->source + offset, length, entry->registration};
}

void RendezvousSender::on_write_completed(uint32_t id, bool succeeded) {
  Entry* entry = find(id);
  if (entry == nullptr || entry->writes_in_flight == 0) return;
  --entry->writes_in_flight;
  if (!succeeded) entry->write_failed = true;
  // A reliable connection completes a write only once the receiver holds its
  // bytes: every byte written is every byte delivered. Waiting for the
  // receiver to say so as well would cost its wakeup and a message.
  if (entry->writes_in_flight == 0 && entry->requested == entry->length && !entry->write_failed &&
      entry->outcome == RendezvousOutcome::pending)
    entry->outcome = RendezvousOutcome::done;
}

void RendezvousSender::finish(uint32_t id) {
  std::erase_if(entries_, [id](const Entry& entry) { return entry.id == id; });
}

uint64_t RendezvousSender::bytes_in_flight() const {
  uint64_t total = 0;
  for (const Entry& entry : entries_)
    if (entry.outcome == RendezvousOutcome::pending) total += entry.length;
  return total;
}

}  // namespace qpsock::stream
