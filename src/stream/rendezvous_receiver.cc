#include "stream/rendezvous_receiver.h"

#include <algorithm>
#include <cstring>

namespace qpsock::stream {

int BounceBuffer::reserve(Transport& transport, size_t additional, MemoryAccess access) {
  const size_t held = held_bytes();
  if (end_ + additional <= memory_.size()) return 0;
  if (held + additional <= memory_.size()) {
    std::memmove(memory_.data(), memory_.data() + begin_, held);
  } else {
    MappedMemory bigger;
    if (int error = bigger.map(std::max(held + additional, 2 * memory_.size())); error < 0)
      return error;
    std::unique_ptr<MemoryRegistration> registration;
    if (int error = transport.register_memory(bigger.data(), bigger.size(), access, registration);
        error < 0)
      return error;
    if (held > 0) std::memcpy(bigger.data(), memory_.data() + begin_, held);
    registration_ = std::move(registration);
    memory_ = std::move(bigger);
  }
  begin_ = 0;
  end_ = held;
  return 0;
}

LocalSlice BounceBuffer::landing(size_t length) {
  return {memory_.data() + end_, length, registration_.get()};
}

void BounceBuffer::consume(size_t length) {
  begin_ += std::min(length, held_bytes());
  if (begin_ == end_) begin_ = end_ = 0;
}

void RendezvousReceiver::on_scanned(const RendezvousDescriptor& descriptor,
                                    uint64_t ring_offset) {
  pending_.push_back(IncomingRendezvous{descriptor, ring_offset});
}

CancelAnswer RendezvousReceiver::on_cancel(uint32_t id, uint64_t& declined_bytes) {
  auto found = std::find_if(pending_.begin(), pending_.end(), [id](const IncomingRendezvous& r) {
    return r.descriptor.id == id && !r.declined;
  });
  if (found == pending_.end()) return CancelAnswer::unknown;
  if (found->claimed || found->requested > 0) return CancelAnswer::too_late;
  found->declined = true;
  declined_bytes = found->descriptor.length;
  return CancelAnswer::declined;
}

}  // namespace qpsock::stream
