// The next definition (normally glibc's) of every function qpsock interposes.
//
// qpsock's own code calls the real functions only through here, so it never
// re-enters its own wrappers. Each pointer is resolved on first use with
// dlsym(RTLD_NEXT); all of them are also resolved once from the library
// constructor so that a signal handler almost never meets an unresolved one.
// While dlsym runs on a thread (it may call malloc, and a replacement malloc
// may call read or open), every wrapper called on that thread falls back to
// the raw system call instead of recursing into dlsym.
#pragma once

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>

extern "C" {
// glibc's _FORTIFY_SOURCE entry points, declared here because the headers only
// declare them when fortification is on.
ssize_t __read_chk(int fd, void* buffer, size_t count, size_t buffer_size);
ssize_t __recv_chk(int fd, void* buffer, size_t count, size_t buffer_size, int flags);
ssize_t __recvfrom_chk(int fd, void* buffer, size_t count, size_t buffer_size, int flags,
                       sockaddr* address, socklen_t* address_length);
int __poll_chk(pollfd* fds, nfds_t count, int timeout, size_t fds_size);
int __ppoll_chk(pollfd* fds, nfds_t count, const timespec* timeout, const sigset_t* mask,
                size_t fds_size);
[[noreturn]] void __chk_fail(void);
}

namespace qpsock::libc {

// X(name): every interposed function whose next definition qpsock may call.
#define QPSOCK_FOR_EACH_NEXT_SYMBOL(X)                                                     \
  X(socket) X(socketpair) X(bind) X(listen) X(accept) X(accept4) X(connect) X(close)      \
  X(shutdown) X(read) X(readv) X(write) X(writev) X(send) X(sendto) X(sendmsg)            \
  X(sendmmsg) X(recv) X(recvfrom) X(recvmsg) X(recvmmsg) X(sendfile) X(sendfile64)        \
  X(splice) X(poll) X(ppoll) X(select) X(pselect) X(epoll_create) X(epoll_create1)        \
  X(epoll_ctl) X(epoll_wait) X(epoll_pwait) X(epoll_pwait2) X(fcntl) X(fcntl64) X(ioctl)  \
  X(getsockopt) X(setsockopt) X(getsockname) X(getpeername) X(dup) X(dup2) X(dup3)        \
  X(fork) X(execve) X(execv) X(execvp) X(execvpe) X(fexecve) X(posix_spawn)               \
  X(posix_spawnp) X(system) X(popen) X(open) X(close_range) X(closefrom) X(_exit) X(_Exit)

struct NextSymbolTable {
// void*: glibc's attributes on the function types cannot ride in a template argument.
#define QPSOCK_DECLARE_POINTER(name) std::atomic<void*> name{nullptr};
  QPSOCK_FOR_EACH_NEXT_SYMBOL(QPSOCK_DECLARE_POINTER)
#undef QPSOCK_DECLARE_POINTER
};

// Raw-syscall stand-ins, used only while dlsym is running on the calling thread.
namespace raw {
#define QPSOCK_DECLARE_RAW(name) extern const decltype(&::name) name;
QPSOCK_FOR_EACH_NEXT_SYMBOL(QPSOCK_DECLARE_RAW)
#undef QPSOCK_DECLARE_RAW
}  // namespace raw

NextSymbolTable& next_symbol_table();
// Resolves one symbol; returns nullptr while this thread is already inside dlsym.
void* resolve_next_symbol(const char* name);
// Resolves them all; called from the library constructor.
void resolve_all_next_symbols();

}  // namespace qpsock::libc

// next::read(...) calls the next read, resolving it on first use.
namespace qpsock::next {
#define QPSOCK_DEFINE_NEXT_CALL(name)                                                       \
  template <typename... Arguments>                                                          \
  inline auto name(Arguments... arguments) {                                                \
    auto& slot = ::qpsock::libc::next_symbol_table().name;                                  \
    void* function = slot.load(std::memory_order_acquire);                                  \
    if (function == nullptr) [[unlikely]] {                                                 \
      function = ::qpsock::libc::resolve_next_symbol(#name);                                \
      if (function == nullptr) return ::qpsock::libc::raw::name(arguments...);              \
      slot.store(function, std::memory_order_release);                                      \
    }                                                                                       \
    return reinterpret_cast<decltype(&::name)>(function)(arguments...);                     \
  }
QPSOCK_FOR_EACH_NEXT_SYMBOL(QPSOCK_DEFINE_NEXT_CALL)
#undef QPSOCK_DEFINE_NEXT_CALL
}  // namespace qpsock::next
