#include "transport/verbs/verbs_library.h"

#include <dlfcn.h>
#include <time.h>

#include <atomic>

#include "common/errno_guard.h"
#include "common/log.h"

namespace qpsock::transport::verbs {
namespace {

// Not a function-local static: its guard would hang a child forked while
// another thread loaded, and abort a signal handler that re-entered the load.
enum class LoadState : int { not_loaded, loading, loaded, failed };
std::atomic<LoadState> load_state{LoadState::not_loaded};
// Written by the one loading thread before it publishes `loaded`.
VerbsLibrary functions;
// This thread is inside load() (a signal handler that connects must not wait
// for itself). Initial-exec TLS, as in libc/next_symbols.cc: never allocates.
__attribute__((tls_model("initial-exec"))) thread_local bool loading_here = false;

// Null, or why `file` cannot be opened (dlerror's text, valid until the
// thread's next dl call: logged before that).
const char* open_library(const char* file, void*& library) {
  // Local: the libraries' symbols must not become definitions the program or
  // other libraries bind to. Never closed: the functions live as long as the
  // process may call them.
  library = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  return library != nullptr ? nullptr : dlerror();
}

bool load() {
  void* verbs = nullptr;
  void* rdma_cm = nullptr;
  const char* problem = open_library("libibverbs.so.1", verbs);
  if (problem == nullptr) problem = open_library("librdmacm.so.1", rdma_cm);
  if (problem != nullptr) {
    QPSOCK_LOG(warn, "RDMA libraries cannot be loaded (%s): connections stay on TCP "
               "(install libibverbs1 and librdmacm1)", problem);
    return false;
  }
  // The first function missing (at its version) is named.
  const char* missing = nullptr;
#define QPSOCK_RESOLVE_VERBS_FUNCTION(library, name, version)                              \
  if (missing == nullptr) {                                                                \
    functions.name = reinterpret_cast<decltype(&::name)>(dlvsym(library, #name, version)); \
    if (functions.name == nullptr) missing = #name "@" version;                            \
  }
#define QPSOCK_RESOLVE_FROM_VERBS(name, version) QPSOCK_RESOLVE_VERBS_FUNCTION(verbs, name, version)
#define QPSOCK_RESOLVE_FROM_RDMA_CM(name, version)                                          \
  QPSOCK_RESOLVE_VERBS_FUNCTION(rdma_cm, name, version)
  QPSOCK_FOR_EACH_VERBS_FUNCTION(QPSOCK_RESOLVE_FROM_VERBS)
  QPSOCK_FOR_EACH_RDMA_CM_FUNCTION(QPSOCK_RESOLVE_FROM_RDMA_CM)
#undef QPSOCK_RESOLVE_FROM_RDMA_CM
#undef QPSOCK_RESOLVE_FROM_VERBS
#undef QPSOCK_RESOLVE_VERBS_FUNCTION
  if (missing != nullptr) {
    QPSOCK_LOG(warn, "the RDMA libraries lack %s (rdma-core too old): connections stay on TCP",
               missing);
    return false;
  }
  QPSOCK_LOG(debug, "RDMA libraries loaded (libibverbs, librdmacm)");
  return true;
}

}  // namespace

bool verbs_library_loaded() {
  LoadState state = load_state.load(std::memory_order_acquire);
  if (state == LoadState::loaded) return true;
  if (state == LoadState::failed || loading_here) return false;
  ErrnoGuard errno_guard;
  if (state == LoadState::not_loaded &&
      load_state.compare_exchange_strong(state, LoadState::loading, std::memory_order_acq_rel)) {
    loading_here = true;
    const bool loaded = load();
    loading_here = false;
    load_state.store(loaded ? LoadState::loaded : LoadState::failed, std::memory_order_release);
    return loaded;
  }
  // Another thread loads, which takes about a millisecond. The wait is
  // bounded: that thread may itself wait for the loader's lock, held by this
  // one (a library constructor that connects while another thread makes the
  // first RDMA connection); this connection then stays on TCP.
  for (int pause_count = 0; pause_count < 5000; ++pause_count) {
    state = load_state.load(std::memory_order_acquire);
    if (state != LoadState::loading) return state == LoadState::loaded;
    const timespec pause{0, 200'000};
    nanosleep(&pause, nullptr);
  }
  return false;
}

const VerbsLibrary& verbs_library() { return functions; }

void verbs_library_after_fork_in_child() {
  // Only the forking thread came along: a thread loading in the parent did
  // not, and the child would wait for it.
  // Looked at first: a compare-exchange writes even when it fails, and the
  // write would copy the page (at every fork of a forking server).
  LoadState loading = LoadState::loading;
  if (load_state.load(std::memory_order_acquire) == loading)
    load_state.compare_exchange_strong(loading, LoadState::not_loaded, std::memory_order_acq_rel);
}

}  // namespace qpsock::transport::verbs
