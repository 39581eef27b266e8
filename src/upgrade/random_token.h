#pragma once

#include "upgrade/handshake_messages.h"

namespace qpsock::upgrade {

// Fills a binding token from getrandom(2) (never blocks: falls back to a
// clock-and-address mix if the entropy pool is not ready, as early in boot).
void fill_random_token(BindingToken& token);

}  // namespace qpsock::upgrade
