#include "transport/verbs/verbs_registration.h"

#include <cerrno>

#include "transport/verbs/verbs_library.h"

namespace qpsock::transport::verbs {

using stream::MemoryAccess;

int access_flags(MemoryAccess access) {
  switch (access) {
    case MemoryAccess::remote_write:
      return IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    case MemoryAccess::remote_read:
      return IBV_ACCESS_REMOTE_READ;
    case MemoryAccess::local_only:
      return IBV_ACCESS_LOCAL_WRITE;
  }
  return IBV_ACCESS_LOCAL_WRITE;
}

int VerbsRegistration::create(ProtectionDomain domain, void* address, size_t length,
                              MemoryAccess access, std::unique_ptr<VerbsRegistration>& out) {
  if (domain == nullptr || address == nullptr || length == 0) return -EINVAL;
  PinCharge charge;
  if (int error = charge_pinning(address, length, charge); error < 0) return error;
  // What verbs.h's ibv_reg_mr (a macro around an inline function) calls for
  // flags that are not a constant: the region's I/O address is its address.
  MemoryRegion region(verbs_library().ibv_reg_mr_iova2(
      domain.get(), address, length, reinterpret_cast<uintptr_t>(address), access_flags(access)));
  if (region == nullptr) return errno != 0 ? -errno : -ENOMEM;
  out = std::make_unique<VerbsRegistration>(ConstructionKey{}, std::move(charge), std::move(domain),
                                            std::move(region), access);
  return 0;
}

VerbsRegistration::VerbsRegistration(ConstructionKey, PinCharge charge, ProtectionDomain domain,
                                     MemoryRegion region, MemoryAccess access)
    : MemoryRegistration(static_cast<std::byte*>(region->addr), region->length, region->lkey,
                         region->rkey, access),
      charge_(std::move(charge)),
      domain_(std::move(domain)),
      region_(std::move(region)) {}

}  // namespace qpsock::transport::verbs
