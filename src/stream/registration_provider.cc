#include "stream/registration_provider.h"

namespace qpsock::stream {

int DirectRegistrationProvider::acquire(void* address, size_t length, MemoryAccess access,
                                        RegistrationLease& lease) {
  std::unique_ptr<MemoryRegistration> registration;
  if (int error = transport_.register_memory(address, length, access, registration); error < 0)
    return error;
  lease = std::move(registration);
  return 0;
}

}  // namespace qpsock::stream
