#include "stats/slot_text.h"

#include <atomic>

namespace qpsock::stats {

void copy_text(char* field, size_t size, const char* text) {
  size_t length = 0;
  if (text != nullptr) {
    for (; length + 1 < size && text[length] != '\0'; ++length) field[length] = text[length];
  }
  field[length] = '\0';
}

// The text is stored with release (not relaxed plus a fence, which
// ThreadSanitizer cannot follow): a reader that sees any new character then
// also sees the odd sequence number that came before it, and retries.
void write_reason(format::Slot& slot, const char* reason) {
  uint32_t sequence = slot.reason_sequence.load(std::memory_order_relaxed);
  if ((sequence & 1) != 0 ||
      !slot.reason_sequence.compare_exchange_strong(sequence, sequence + 1, std::memory_order_acquire)) {
    return;
  }
  const char* text = reason != nullptr ? reason : "";
  size_t length = 0;
  for (; length + 1 < sizeof(slot.reason) && text[length] != '\0'; ++length)
    std::atomic_ref<char>(slot.reason[length]).store(text[length], std::memory_order_release);
  std::atomic_ref<char>(slot.reason[length]).store('\0', std::memory_order_release);
  slot.reason_sequence.store(sequence + 2, std::memory_order_release);
}

}  // namespace qpsock::stats
