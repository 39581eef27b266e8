// Entry points for fork, vfork, the exec family and posix_spawn.
#pragma once

#include <spawn.h>
#include <sys/types.h>

#include <cstdarg>
#include <cstdio>

namespace qpsock::process {

pid_t fork();
// vfork's child borrows the parent's stack, so no wrapper can run between the
// two returns safely; qpsock's vfork is a fork (the child may only exec or
// _exit either way, as POSIX requires).
pid_t vfork();

int execve(const char* path, char* const argv[], char* const envp[]);
int execv(const char* path, char* const argv[]);
int execvp(const char* file, char* const argv[]);
int execvpe(const char* file, char* const argv[], char* const envp[]);
int fexecve(int fd, char* const argv[], char* const envp[]);

// execl, execlp and execle: the arguments after `first`, up to a null pointer
// (and, for execle, the environment after it).
enum class ListExecVariant { path, search_path, path_with_environment };
int exec_argument_list(ListExecVariant variant, const char* target, const char* first,
                       va_list arguments);

int posix_spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* actions,
                const posix_spawnattr_t* attributes, char* const argv[], char* const envp[]);
int posix_spawnp(pid_t* pid, const char* file, const posix_spawn_file_actions_t* actions,
                 const posix_spawnattr_t* attributes, char* const argv[], char* const envp[]);

// glibc starts system's and popen's shell through its internal posix_spawn,
// with the process's current environ: when the program has cleared or changed
// it, qpsock swaps in the inherited environment for the duration of the call.
int system(const char* command);
FILE* popen(const char* command, const char* mode);

// _exit and _Exit: the process's upgraded streams deliver what send took
// before it ends (upgrade::connections_before_exit); exit(3) meets the same
// in a handler on_library_load registers.
enum class ImmediateExit { underscore_exit, underscore_capital_exit };
[[noreturn]] void exit_immediately(ImmediateExit call, int status);

// Called once from the library constructor.
void on_library_load();

}  // namespace qpsock::process
