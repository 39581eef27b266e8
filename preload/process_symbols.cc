// Exported: _exit and _Exit, fork, vfork, the exec family and posix_spawn.
#include <cstdarg>

#include "process/process_calls.h"

using qpsock::process::ListExecVariant;

extern "C" {

void _exit(int status) noexcept {
  qpsock::process::exit_immediately(qpsock::process::ImmediateExit::underscore_exit, status);
}
void _Exit(int status) noexcept {
  qpsock::process::exit_immediately(qpsock::process::ImmediateExit::underscore_capital_exit,
                                    status);
}

pid_t fork() noexcept { return qpsock::process::fork(); }
pid_t vfork() noexcept { return qpsock::process::vfork(); }

int execve(const char* path, char* const argv[], char* const envp[]) noexcept {
  return qpsock::process::execve(path, argv, envp);
}
int execv(const char* path, char* const argv[]) noexcept {
  return qpsock::process::execv(path, argv);
}
int execvp(const char* file, char* const argv[]) noexcept {
  return qpsock::process::execvp(file, argv);
}
int execvpe(const char* file, char* const argv[], char* const envp[]) noexcept {
  return qpsock::process::execvpe(file, argv, envp);
}
int fexecve(int fd, char* const argv[], char* const envp[]) noexcept {
  return qpsock::process::fexecve(fd, argv, envp);
}
int execl(const char* path, const char* first, ...) noexcept {
  va_list arguments;
  va_start(arguments, first);
  int result = qpsock::process::exec_argument_list(ListExecVariant::path, path, first, arguments);
  va_end(arguments);
  return result;
}
int execlp(const char* file, const char* first, ...) noexcept {
  va_list arguments;
  va_start(arguments, first);
  int result =
      qpsock::process::exec_argument_list(ListExecVariant::search_path, file, first, arguments);
  va_end(arguments);
  return result;
}
int execle(const char* path, const char* first, ...) noexcept {
  va_list arguments;
  va_start(arguments, first);
  int result = qpsock::process::exec_argument_list(ListExecVariant::path_with_environment, path,
                                                   first, arguments);
  va_end(arguments);
  return result;
}

int posix_spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* actions,
                const posix_spawnattr_t* attributes, char* const argv[], char* const envp[]) {
  return qpsock::process::posix_spawn(pid, path, actions, attributes, argv, envp);
}
int posix_spawnp(pid_t* pid, const char* file, const posix_spawn_file_actions_t* actions,
                 const posix_spawnattr_t* attributes, char* const argv[], char* const envp[]) {
  return qpsock::process::posix_spawnp(pid, file, actions, attributes, argv, envp);
}

int system(const char* command) { return qpsock::process::system(command); }
FILE* popen(const char* command, const char* mode) {
  return qpsock::process::popen(command, mode);
}

}  // extern "C"
