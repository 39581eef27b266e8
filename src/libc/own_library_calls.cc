#include "libc/own_library_calls.h"

namespace qpsock::libc {

constinit __attribute__((tls_model("initial-exec"))) thread_local bool inside_own_library_call = false;

}  // namespace qpsock::libc
