// A memory region registered with a connection's protection domain: the
// stream::MemoryRegistration the verbs transport hands the engine. The verbs
// access flags follow what the peer may do (stream::MemoryAccess); the local
// side may always read its own registered memory.
#pragma once

#include <cstddef>
#include <memory>

#include "stream/transport.h"
#include "transport/verbs/pin_budget.h"
#include "transport/verbs/verbs_handles.h"

namespace qpsock::transport::verbs {

// IBV_ACCESS_* for `access`: remote_write (our receive ring) gets
// LOCAL_WRITE|REMOTE_WRITE (the verbs require LOCAL_WRITE with REMOTE_WRITE),
// remote_read (a rendezvous source, which may be read-only memory: no write
// access, so the pages are pinned for reading only) REMOTE_READ, local_only
// (staging, bounce and read destinations) LOCAL_WRITE.
int access_flags(stream::MemoryAccess access);

class VerbsRegistration final : public stream::MemoryRegistration {
  struct ConstructionKey {
    explicit ConstructionKey() = default;
  };

 public:
  // ibv_reg_mr of [address, address + length) in `domain`, charged to the
  // pinning budget first (transport/verbs/pin_budget.h): 0 or -errno
  // (-ENOMEM when the budget refuses it).
  static int create(ProtectionDomain domain, void* address, size_t length,
                    stream::MemoryAccess access, std::unique_ptr<VerbsRegistration>& out);

  VerbsRegistration(ConstructionKey, PinCharge charge, ProtectionDomain domain,
                    MemoryRegion region, stream::MemoryAccess access);

 private:
  PinCharge charge_;         // declared first: given back once the region is gone
  ProtectionDomain domain_;  // outlives the region
  MemoryRegion region_;
};

}  // namespace qpsock::transport::verbs
