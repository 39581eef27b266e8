// Where the engine gets registrations for application buffers (a rendezvous
// source on the sender, a direct-pull destination on the receiver). The verbs
// stage plugs in its registration cache here; the default registers every time.
#pragma once

#include <cstddef>
#include <memory>

#include "stream/transport.h"

namespace qpsock::stream {

// Keeps a registration valid while the engine uses it. A cache may lend the
// same registration to several users, and may return one covering more than
// was asked (RDMA keys address the whole registered region by virtual address).
using RegistrationLease = std::shared_ptr<const MemoryRegistration>;

class RegistrationProvider {
 public:
  virtual ~RegistrationProvider() = default;
  // A registration covering [address, address + length) with `access`: 0 or
  // -errno. It must never be stale: memory unmapped and mapped again at the
  // same address is new memory.
  virtual int acquire(void* address, size_t length, MemoryAccess access,
                      RegistrationLease& lease) = 0;
};

// No cache: registers on every acquire, deregisters when the lease ends.
class DirectRegistrationProvider final : public RegistrationProvider {
 public:
  explicit DirectRegistrationProvider(Transport& transport) : transport_(transport) {}
  int acquire(void* address, size_t length, MemoryAccess access,
              RegistrationLease& lease) override;

 private:
  Transport& transport_;
};

}  // namespace qpsock::stream
