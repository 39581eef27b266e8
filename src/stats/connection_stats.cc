#include "stats/connection_stats.h"

#include <new>

namespace qpsock::stats {
namespace {

// Never destroyed: other threads may still move bytes while the process exits.
union ProcessRegistryStorage {
  constexpr ProcessRegistryStorage() : registry() {}
  ~ProcessRegistryStorage() {}
  Registry registry;
};
constinit ProcessRegistryStorage process_registry_storage;

// At normal exit (and dlclose): this process lets go of its connections and
// removes its file. A process killed by a signal leaves the file behind;
// qpsock-stat removes it once the pid is gone.
__attribute__((destructor)) void release_at_exit() { process_registry_storage.registry.release_all(); }

}  // namespace

Registry& process_registry() { return process_registry_storage.registry; }

void before_fork() { process_registry().before_fork(); }

void after_fork(pid_t result) {
  if (result == 0) {
    process_registry().after_fork_in_child();
  } else {
    process_registry().after_fork_in_parent(result < 0);
  }
}

void before_image_ends() { process_registry().release_all(); }

void before_immediate_exit() { process_registry().release_all(true); }

}  // namespace qpsock::stats
