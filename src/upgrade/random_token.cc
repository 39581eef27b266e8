#include "upgrade/random_token.h"

#include <algorithm>
#include <cstring>

#include "common/random_word.h"

namespace qpsock::upgrade {

void fill_random_token(BindingToken& token) {
  for (size_t filled = 0; filled < token.size(); filled += sizeof(uint64_t)) {
    const uint64_t word = random_word();
    memcpy(token.data() + filled, &word, std::min(sizeof(word), token.size() - filled));
  }
}

}  // namespace qpsock::upgrade
