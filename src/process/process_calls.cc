#include "process/process_calls.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <new>

#include "common/errno_guard.h"
#include "common/kept_fd.h"
#include "common/wiped_on_fork.h"
#include "libc/next_symbols.h"
#include "process/inherited_environment.h"
#include "transport/verbs/pin_budget.h"
#include "upgrade/forked_children.h"
#include "upgrade/socket_upgrade.h"
#include "stats/connection_stats.h"
#include "transport/verbs/verbs_library.h"

extern char** environ;

namespace qpsock::process {
void on_library_load() {
  libc::resolve_all_next_symbols();
  prepare_wiped_on_fork_memory();
  // The child's fork handlers run in the order registered: this one first,
  // so that its wiped memory is written before anything reads it.
  pthread_atfork(nullptr, nullptr, touch_wiped_memory_in_child);
  watch_forks_for_kept_fds();
  capture_inherited_environment();
  upgrade::adopt_inherited_streams();
  // Registered at load, so it runs after the exit handlers and static
  // destructors registered later (the program's own), which may still
  // write; those of libraries initialized before qpsock run after it.
  std::atexit([] { upgrade::connections_before_exit(stream::Stream::ExitCall::exit); });
}

void exit_immediately(ImmediateExit call, int status) {
  upgrade::connections_before_exit(stream::Stream::ExitCall::underscore_exit);
  stats::before_immediate_exit();
  if (call == ImmediateExit::underscore_capital_exit) next::_Exit(status);
  next::_exit(status);
  __builtin_unreachable();
}

pid_t fork() {
  // The statistics rows of inherited connections must survive until the
  // child has joined them (src/stats/registry.h).
  stats::before_fork();
  upgrade::fork_starting();
  pid_t result = next::fork();
  ErrnoGuard errno_guard;
  if (result == 0) {
    upgrade::connections_after_fork_in_child();
    transport::verbs::verbs_library_after_fork_in_child();
    // The child's address space pins nothing; the parent's registrations it
    // inherits are never released here (Connection::abandon_inherited_stream).
    transport::verbs::reset_process_pin_budget_in_child();
  }
  upgrade::fork_finished(result);
  stats::after_fork(result);
  return result;
}

pid_t vfork() { return process::fork(); }

namespace {

enum class NewProgram : uint8_t {
  replaces_this_one,  // exec
  fails_to_start,     // an exec bound to fail: the process and its connections stay as they are
  starts_beside_it,   // posix_spawn, system, popen: this process goes on with its streams
};

// The first steps of starting a program, in their order: this process's
// connections are settled (which names the sockets whose streams the new
// program may not use), then the new program's environment is made, naming
// them.
class ProgramStart {
 public:
  ProgramStart(char* const* envp, NewProgram start) : environment_(envp, settled(start)) {
    if (start != NewProgram::starts_beside_it) stats::before_image_ends();
  }
  char* const* environment() const { return environment_.get(); }

 private:
  const char* settled(NewProgram start) {
    if (start == NewProgram::replaces_this_one) upgrade::connections_before_exec(inherited_);
    if (start == NewProgram::starts_beside_it) upgrade::connections_before_spawn(inherited_);
    return inherited_.assignment();
  }

  upgrade::InheritedStreamsMarker inherited_;  // before environment_, which points into it
  InheritedEnvironment environment_;
};

}  // namespace

int execve(const char* path, char* const argv[], char* const envp[]) {
  ProgramStart exec(envp, path != nullptr && access(path, X_OK) == 0 ? NewProgram::replaces_this_one
                                                                      : NewProgram::fails_to_start);
  return next::execve(path, argv, exec.environment());
}

int execv(const char* path, char* const argv[]) { return process::execve(path, argv, environ); }

int execvp(const char* file, char* const argv[]) {
  return process::execvpe(file, argv, environ);
}

int execvpe(const char* file, char* const argv[], char* const envp[]) {
  ProgramStart exec(envp, NewProgram::replaces_this_one);
  return next::execvpe(file, argv, exec.environment());
}

int fexecve(int fd, char* const argv[], char* const envp[]) {
  ProgramStart exec(envp, NewProgram::replaces_this_one);
  return next::fexecve(fd, argv, exec.environment());
}

int exec_argument_list(ListExecVariant variant, const char* target, const char* first,
                       va_list arguments) {
  va_list counting;
  va_copy(counting, arguments);
  size_t count = 1;
  if (first != nullptr) {
    while (va_arg(counting, const char*) != nullptr) ++count;
  }
  va_end(counting);

  // mmap rather than malloc: this often runs in a freshly forked child.
  size_t bytes = (count + 1) * sizeof(char*);
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    errno = ENOMEM;
    return -1;
  }
  auto** argv = static_cast<char**>(memory);
  argv[0] = const_cast<char*>(first);
  for (size_t index = 1; index < count; ++index) argv[index] = va_arg(arguments, char*);
  argv[count] = nullptr;
  char* const* envp = environ;
  if (variant == ListExecVariant::path_with_environment) {
    if (first != nullptr) va_arg(arguments, char*);  // the terminating null
    envp = va_arg(arguments, char* const*);
  }

  int result = -1;
  switch (variant) {
    case ListExecVariant::path:
    case ListExecVariant::path_with_environment:
      result = process::execve(target, argv, envp);
      break;
    case ListExecVariant::search_path:
      result = process::execvpe(target, argv, envp);
      break;
  }
  int saved = errno;
  munmap(memory, bytes);
  errno = saved;
  return result;
}

namespace {

// The environments that system() and popen() calls under way have put in
// environ, newest last: each call's own node, on its stack. When several run
// at once, only the newest one's end changes environ (to the next newest, or
// the process's own), so none leaves it pointing at an environment that has
// been freed (two at once used to: the first to end restored the process's,
// the second then the first one's, unmapped by then).
struct EnvironSwap {
  char** environment;
  EnvironSwap* older;
  EnvironSwap* newer;
};

struct EnvironSwaps {
  std::mutex mutex;
  EnvironSwap* newest = nullptr;
  char** original = nullptr;
};

EnvironSwaps& environ_swaps() {
  // Never destroyed: system() may run from an exit handler.
  alignas(EnvironSwaps) static unsigned char storage[sizeof(EnvironSwaps)];
  static EnvironSwaps* const instance = ::new (storage) EnvironSwaps;
  return *instance;
}

// Runs `call` with environ replaced by the new program's environment, only if
// the current one lacks something or the program inherits upgraded sockets.
// Another thread's setenv during the call would be lost, as with any setenv
// that races a spawn; the common case (nothing to add) swaps nothing. The
// lock is held only around the swaps, never across the call.
template <typename Call>
auto with_inherited_environ(Call call) {
  EnvironSwaps& swaps = environ_swaps();
  char** process_environment = nullptr;
  {
    // Made from the process's environment, never from another call's (whose
    // strings go when it ends).
    std::lock_guard lock(swaps.mutex);
    process_environment = swaps.newest != nullptr ? swaps.original : environ;
  }
  ProgramStart start(process_environment, NewProgram::starts_beside_it);
  if (start.environment() == process_environment) return call();
  EnvironSwap mine{const_cast<char**>(start.environment()), nullptr, nullptr};
  {
    std::lock_guard lock(swaps.mutex);
    if (swaps.newest == nullptr) swaps.original = environ;
    mine.older = swaps.newest;
    if (swaps.newest != nullptr) swaps.newest->newer = &mine;
    swaps.newest = &mine;
    environ = mine.environment;
  }
  auto result = call();
  const int saved_errno = errno;
  {
    std::lock_guard lock(swaps.mutex);
    if (mine.older != nullptr) mine.older->newer = mine.newer;
    if (mine.newer != nullptr) mine.newer->older = mine.older;
    if (swaps.newest == &mine) {
      // environ is ours (or the program's setenv made it from ours, whose
      // strings go with us): the next newest, or the process's own.
      swaps.newest = mine.older;
      environ = swaps.newest != nullptr ? swaps.newest->environment : swaps.original;
    }
  }
  errno = saved_errno;
  return result;
}

}  // namespace

// system and popen start a shell that holds this process's sockets (those
// not close-on-exec) without a fork or exec qpsock sees: counted as forks,
// so that a server's upgrade claimed before declines (a child of the shell
// may go on using the socket); their children are not remembered.
int system(const char* command) {
  if (command == nullptr) return next::system(command);  // "is a shell available?"
  upgrade::fork_starting();
  const int result = with_inherited_environ([&] { return next::system(command); });
  upgrade::fork_finished(-1);
  return result;
}

FILE* popen(const char* command, const char* mode) {
  upgrade::fork_starting();
  FILE* const stream = with_inherited_environ([&] { return next::popen(command, mode); });
  upgrade::fork_finished(-1);
  return stream;
}

namespace {

// A spawned program holds the sockets it inherited, as a forked child does
// (it may read one its file actions made its stdin): it is remembered with
// the forked children, so that a client's upgrade still to be answered
// declines while it keeps the socket. `spawn` takes where to put the pid,
// which the caller may not want (a null `pid`).
template <typename Spawn>
int spawn_remembered(pid_t* pid, Spawn spawn) {
  pid_t child = 0;
  upgrade::fork_starting();
  const int result = spawn(&child);
  ErrnoGuard errno_guard;
  upgrade::fork_finished(result == 0 && child > 0 ? child : -1);
  if (result == 0 && pid != nullptr) *pid = child;
  return result;
}

}  // namespace

int posix_spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* actions,
                const posix_spawnattr_t* attributes, char* const argv[], char* const envp[]) {
  ProgramStart start(envp, NewProgram::starts_beside_it);
  return spawn_remembered(pid, [&](pid_t* child) {
    return next::posix_spawn(child, path, actions, attributes, argv, start.environment());
  });
}

int posix_spawnp(pid_t* pid, const char* file, const posix_spawn_file_actions_t* actions,
                 const posix_spawnattr_t* attributes, char* const argv[], char* const envp[]) {
  ProgramStart start(envp, NewProgram::starts_beside_it);
  return spawn_remembered(pid, [&](pid_t* child) {
    return next::posix_spawnp(child, file, actions, attributes, argv, start.environment());
  });
}

}  // namespace qpsock::process
