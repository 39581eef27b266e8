// Whether this process can take an RDMA upgrade at all, asked before any
// rdma_cm or verbs call so that a host without RDMA, or a process whose
// RLIMIT_MEMLOCK cannot pin one connection's buffers, stays on TCP at once
// with one line saying why (and never a warning per connection).
#pragma once

#include <cstdint>

namespace qpsock::upgrade {

// Null if an RDMA upgrade may be tried for a connection whose receive ring is
// `ring_size` bytes, else the reason (a string literal, for the log and
// qpsock-stat). The first time a reason is given in this process it is also
// logged once at warn level, with the numbers, when the user can fix it.
const char* reason_rdma_unusable(uint64_t ring_size);

// The bytes one connection pins with ibv_reg_mr from the start: our receive
// ring, the staging copy of the peer's (assumed the same size) and a first
// bounce buffer. Rendezvous registrations come on top, and fall back to
// copying when they fail.
uint64_t pinned_bytes_per_connection(uint64_t ring_size);

// After an upgrade failed with `error` (-errno): if it was a registration
// refused for RLIMIT_MEMLOCK (the process's connections together have used
// the limit up), logs that once per process at warn level, with the limit
// and what the process pins already.
void report_pinning_failure(int error, uint64_t ring_size);

}  // namespace qpsock::upgrade
