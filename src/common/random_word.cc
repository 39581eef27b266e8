#include "common/random_word.h"

#include <sys/random.h>
#include <unistd.h>

#include <chrono>

namespace qpsock {

uint64_t random_word() {
  uint64_t word = 0;
  if (::getrandom(&word, sizeof(word), GRND_NONBLOCK) == sizeof(word)) return word;
  word = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
         (static_cast<uint64_t>(::getpid()) << 40) ^ reinterpret_cast<uintptr_t>(&word);
  // splitmix64's finalizer: every input bit reaches every output bit.
  word ^= word >> 31;
  word *= 0xbf58476d1ce4e5b9ull;
  word ^= word >> 29;
  return word;
}

}  // namespace qpsock
