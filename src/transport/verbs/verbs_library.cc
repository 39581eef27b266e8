#include "transport/verbs/verbs_library.h"

#include <dlfcn.h>

#include "common/errno_guard.h"
#include "common/log.h"

namespace qpsock::transport::verbs {
namespace {

struct LoadedLibrary {
  VerbsLibrary functions;
  bool loaded = false;
};

// Null, or why `file` cannot be opened (dlerror's text, valid until the
// thread's next dl call: logged before that).
const char* open_library(const char* file, void*& library) {
  // Local: the libraries' symbols must not become definitions the program or
  // other libraries bind to. Never closed: the functions live as long as the
  // process may call them.
  library = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  return library != nullptr ? nullptr : dlerror();
}

LoadedLibrary load() {
  ErrnoGuard errno_guard;
  LoadedLibrary result;
  void* verbs = nullptr;
  void* rdma_cm = nullptr;
  const char* problem = open_library("libibverbs.so.1", verbs);
  if (problem == nullptr) problem = open_library("librdmacm.so.1", rdma_cm);
  // The first function missing (at its version) is named.
  const char* missing = nullptr;
#define QPSOCK_RESOLVE_VERBS_FUNCTION(library, name, version)                              \
  if (problem == nullptr && missing == nullptr) {                                          \
    result.functions.name =                                                                \
        reinterpret_cast<decltype(&::name)>(dlvsym(library, #name, version));              \
    if (result.functions.name == nullptr) missing = #name "@" version;                     \
  }
#define QPSOCK_RESOLVE_FROM_VERBS(name, version) QPSOCK_RESOLVE_VERBS_FUNCTION(verbs, name, version)
#define QPSOCK_RESOLVE_FROM_RDMA_CM(name, version)                                          \
  QPSOCK_RESOLVE_VERBS_FUNCTION(rdma_cm, name, version)
  QPSOCK_FOR_EACH_VERBS_FUNCTION(QPSOCK_RESOLVE_FROM_VERBS)
  QPSOCK_FOR_EACH_RDMA_CM_FUNCTION(QPSOCK_RESOLVE_FROM_RDMA_CM)
#undef QPSOCK_RESOLVE_FROM_RDMA_CM
#undef QPSOCK_RESOLVE_FROM_VERBS
#undef QPSOCK_RESOLVE_VERBS_FUNCTION
  if (problem != nullptr) {
    QPSOCK_LOG(warn, "RDMA libraries cannot be loaded (%s): connections stay on TCP "
               "(install libibverbs1 and librdmacm1)", problem);
  } else if (missing != nullptr) {
    QPSOCK_LOG(warn, "the RDMA libraries lack %s (rdma-core too old): connections stay on TCP",
               missing);
  } else {
    result.loaded = true;
  }
  return result;
}

const LoadedLibrary& loaded_library() {
  // A magic static: the first caller loads, concurrent ones wait for it.
  static const LoadedLibrary library = load();
  return library;
}

}  // namespace

bool verbs_library_loaded() { return loaded_library().loaded; }

const VerbsLibrary& verbs_library() { return loaded_library().functions; }

}  // namespace qpsock::transport::verbs
