#include "libc/next_symbols.h"

#include <dlfcn.h>

namespace qpsock::libc {
namespace {

// Initial-exec TLS: a preloaded library's TLS is static, and this model never
// calls __tls_get_addr (which may allocate) to reach it.
__attribute__((tls_model("initial-exec"))) thread_local bool inside_dlsym = false;

}  // namespace

NextSymbolTable& next_symbol_table() {
  // Constant-initialised (all nullptr), so usable before any constructor runs.
  static constinit NextSymbolTable table;
  return table;
}

void* resolve_next_symbol(const char* name) {
  if (inside_dlsym) return nullptr;
  inside_dlsym = true;
  void* function = dlsym(RTLD_NEXT, name);
  inside_dlsym = false;
  return function;
}

void resolve_all_next_symbols() {
  auto& table = next_symbol_table();
#define QPSOCK_RESOLVE_ONE(name)                                                          \
  if (table.name.load(std::memory_order_relaxed) == nullptr) {                            \
    if (void* function = resolve_next_symbol(#name))                                      \
      table.name.store(function, std::memory_order_release);                              \
  }
  QPSOCK_FOR_EACH_NEXT_SYMBOL(QPSOCK_RESOLVE_ONE)
#undef QPSOCK_RESOLVE_ONE
}

}  // namespace qpsock::libc
