// Random words for identities, probes and binding tokens: from getrandom(2),
// never blocking; early in boot, before the entropy pool is ready, a mix of
// the clock, the pid and a stack address instead (guessable: the binding
// token's proof is then as weak as that).
#pragma once

#include <cstdint>

namespace qpsock {

uint64_t random_word();

}  // namespace qpsock
