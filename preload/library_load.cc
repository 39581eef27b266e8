// The library's one constructor: resolves the next libc symbols early (so a
// signal handler rarely meets an unresolved one) and records what exec must
// pass on. Everything heavier (config, devices) waits for first use.
#include "process/process_calls.h"

__attribute__((constructor)) static void qpsock_on_library_load() {
  qpsock::process::on_library_load();
}
