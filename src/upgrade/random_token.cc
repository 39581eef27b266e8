#include "upgrade/random_token.h"

#include <sys/random.h>

#include <chrono>
#include <cstring>

namespace qpsock::upgrade {

void fill_random_token(BindingToken& token) {
  if (getrandom(token.data(), token.size(), GRND_NONBLOCK) == static_cast<ssize_t>(token.size()))
    return;
  uint64_t words[2] = {
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()),
      reinterpret_cast<uintptr_t>(&token) ^ 0x9e3779b97f4a7c15ull};
  for (auto& word : words) {
    word ^= word >> 31;
    word *= 0xbf58476d1ce4e5b9ull;
    word ^= word >> 29;
  }
  memcpy(token.data(), words, token.size());
}

}  // namespace qpsock::upgrade
