// System-call stand-ins for the next libc functions, used only while dlsym is
// running on the calling thread (see next_symbols.h). They keep the kernel's
// return value and errno; the few that are not single system calls (PATH
// search, posix_spawn) do the simplest correct thing.
#include <cerrno>
#include <cstdarg>
#include <sys/syscall.h>

#include "libc/next_symbols.h"

extern char** environ;

namespace qpsock::libc::raw {
namespace {

long variadic_argument(va_list arguments) { return va_arg(arguments, long); }

int raw_fcntl(int fd, int command, ...) noexcept {
  va_list arguments;
  va_start(arguments, command);
  long argument = variadic_argument(arguments);
  va_end(arguments);
  return static_cast<int>(syscall(SYS_fcntl, fd, command, argument));
}

int raw_ioctl(int fd, unsigned long request, ...) noexcept {
  va_list arguments;
  va_start(arguments, request);
  long argument = variadic_argument(arguments);
  va_end(arguments);
  return static_cast<int>(syscall(SYS_ioctl, fd, request, argument));
}

int raw_open(const char* path, int flags, ...) noexcept {
  va_list arguments;
  va_start(arguments, flags);
  long mode = variadic_argument(arguments);
  va_end(arguments);
  return static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, flags, mode));
}

int raw_select(int count, fd_set* read_set, fd_set* write_set, fd_set* error_set,
               timeval* timeout) noexcept {
  timespec converted;
  timespec* converted_timeout = nullptr;
  if (timeout != nullptr) {
    converted = {timeout->tv_sec, timeout->tv_usec * 1000};
    converted_timeout = &converted;
  }
  return static_cast<int>(
      syscall(SYS_pselect6, count, read_set, write_set, error_set, converted_timeout, nullptr));
}

int raw_pselect(int count, fd_set* read_set, fd_set* write_set, fd_set* error_set,
                const timespec* timeout, const sigset_t* mask) noexcept {
  // The kernel wants the mask as {pointer, size} and may write the timeout.
  struct {
    const sigset_t* mask;
    size_t size;
  } mask_argument{mask, _NSIG / 8};
  timespec copy;
  timespec* timeout_copy = nullptr;
  if (timeout != nullptr) {
    copy = *timeout;
    timeout_copy = &copy;
  }
  return static_cast<int>(syscall(SYS_pselect6, count, read_set, write_set, error_set,
                                  timeout_copy, mask != nullptr ? &mask_argument : nullptr));
}

int raw_ppoll(pollfd* fds, nfds_t count, const timespec* timeout, const sigset_t* mask) noexcept {
  timespec copy;
  timespec* timeout_copy = nullptr;
  if (timeout != nullptr) {
    copy = *timeout;
    timeout_copy = &copy;
  }
  return static_cast<int>(syscall(SYS_ppoll, fds, count, timeout_copy, mask, _NSIG / 8));
}

int raw_poll(pollfd* fds, nfds_t count, int timeout_milliseconds) noexcept {
  if (timeout_milliseconds < 0) return raw_ppoll(fds, count, nullptr, nullptr);
  timespec timeout{timeout_milliseconds / 1000, (timeout_milliseconds % 1000) * 1000000L};
  return raw_ppoll(fds, count, &timeout, nullptr);
}

int raw_epoll_pwait(int epoll_fd, epoll_event* events, int capacity, int timeout,
                    const sigset_t* mask) noexcept {
  return static_cast<int>(
      syscall(SYS_epoll_pwait, epoll_fd, events, capacity, timeout, mask, _NSIG / 8));
}

int raw_dup2(int old_fd, int new_fd) noexcept {
  if (old_fd == new_fd) {
    // dup2 of an fd onto itself checks validity only.
    return syscall(SYS_fcntl, old_fd, F_GETFD) < 0 ? -1 : new_fd;
  }
  return static_cast<int>(syscall(SYS_dup3, old_fd, new_fd, 0));
}

int raw_execve(const char* path, char* const argv[], char* const envp[]) noexcept {
  return static_cast<int>(syscall(SYS_execve, path, argv, envp));
}

int raw_posix_spawn(pid_t*, const char*, const posix_spawn_file_actions_t*,
                    const posix_spawnattr_t*, char* const[], char* const[]) noexcept {
  return ENOSYS;
}

}  // namespace

const decltype(&::socket) socket = [](int domain, int type, int protocol) noexcept {
  return static_cast<int>(syscall(SYS_socket, domain, type, protocol));
};
const decltype(&::socketpair) socketpair = [](int domain, int type, int protocol, int fds[2]) noexcept {
  return static_cast<int>(syscall(SYS_socketpair, domain, type, protocol, fds));
};
const decltype(&::bind) bind = [](int fd, const sockaddr* address, socklen_t length) noexcept {
  return static_cast<int>(syscall(SYS_bind, fd, address, length));
};
const decltype(&::listen) listen = [](int fd, int backlog) noexcept {
  return static_cast<int>(syscall(SYS_listen, fd, backlog));
};
const decltype(&::accept4) accept4 = [](int fd, sockaddr* address, socklen_t* length,
                                        int flags) noexcept {
  return static_cast<int>(syscall(SYS_accept4, fd, address, length, flags));
};
const decltype(&::accept) accept = [](int fd, sockaddr* address, socklen_t* length) noexcept {
  return static_cast<int>(syscall(SYS_accept4, fd, address, length, 0));
};
const decltype(&::connect) connect = [](int fd, const sockaddr* address, socklen_t length) noexcept {
  return static_cast<int>(syscall(SYS_connect, fd, address, length));
};
const decltype(&::close) close = [](int fd) noexcept {
  return static_cast<int>(syscall(SYS_close, fd));
};
const decltype(&::close_range) close_range = [](unsigned first, unsigned last, int flags) noexcept {
  return static_cast<int>(syscall(SYS_close_range, first, last, flags));
};
const decltype(&::closefrom) closefrom = [](int lowest) noexcept {
  syscall(SYS_close_range, static_cast<unsigned>(lowest), ~0u, 0);
};
const decltype(&::_exit) _exit = [](int status) noexcept {
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
};
const decltype(&::_Exit) _Exit = [](int status) noexcept {
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
};
const decltype(&::shutdown) shutdown = [](int fd, int how) noexcept {
  return static_cast<int>(syscall(SYS_shutdown, fd, how));
};
const decltype(&::read) read = [](int fd, void* buffer, size_t count) noexcept {
  return static_cast<ssize_t>(syscall(SYS_read, fd, buffer, count));
};
const decltype(&::readv) readv = [](int fd, const iovec* vector, int count) noexcept {
  return static_cast<ssize_t>(syscall(SYS_readv, fd, vector, count));
};
const decltype(&::write) write = [](int fd, const void* buffer, size_t count) noexcept {
  return static_cast<ssize_t>(syscall(SYS_write, fd, buffer, count));
};
const decltype(&::writev) writev = [](int fd, const iovec* vector, int count) noexcept {
  return static_cast<ssize_t>(syscall(SYS_writev, fd, vector, count));
};
const decltype(&::sendto) sendto = [](int fd, const void* buffer, size_t count, int flags,
                                      const sockaddr* address, socklen_t length) noexcept {
  return static_cast<ssize_t>(syscall(SYS_sendto, fd, buffer, count, flags, address, length));
};
const decltype(&::send) send = [](int fd, const void* buffer, size_t count, int flags) noexcept {
  return static_cast<ssize_t>(syscall(SYS_sendto, fd, buffer, count, flags, nullptr, 0));
};
const decltype(&::sendmsg) sendmsg = [](int fd, const msghdr* message, int flags) noexcept {
  return static_cast<ssize_t>(syscall(SYS_sendmsg, fd, message, flags));
};
const decltype(&::sendmmsg) sendmmsg = [](int fd, mmsghdr* messages, unsigned int count,
                                          int flags) noexcept {
  return static_cast<int>(syscall(SYS_sendmmsg, fd, messages, count, flags));
};
const decltype(&::recvfrom) recvfrom = [](int fd, void* buffer, size_t count, int flags,
                                          sockaddr* address, socklen_t* length) noexcept {
  return static_cast<ssize_t>(
      syscall(SYS_recvfrom, fd, buffer, count, flags, address, length));
};
const decltype(&::recv) recv = [](int fd, void* buffer, size_t count, int flags) noexcept {
  return static_cast<ssize_t>(syscall(SYS_recvfrom, fd, buffer, count, flags, nullptr, nullptr));
};
const decltype(&::recvmsg) recvmsg = [](int fd, msghdr* message, int flags) noexcept {
  return static_cast<ssize_t>(syscall(SYS_recvmsg, fd, message, flags));
};
const decltype(&::recvmmsg) recvmmsg = [](int fd, mmsghdr* messages, unsigned int count,
                                          int flags, timespec* timeout) noexcept {
  return static_cast<int>(syscall(SYS_recvmmsg, fd, messages, count, flags, timeout));
};
const decltype(&::sendfile) sendfile = [](int out_fd, int in_fd, off_t* offset, size_t count) noexcept {
  return static_cast<ssize_t>(syscall(SYS_sendfile, out_fd, in_fd, offset, count));
};
const decltype(&::sendfile64) sendfile64 = [](int out_fd, int in_fd, off64_t* offset,
                                              size_t count) noexcept {
  return static_cast<ssize_t>(syscall(SYS_sendfile, out_fd, in_fd, offset, count));
};
const decltype(&::splice) splice = [](int in_fd, loff_t* in_offset, int out_fd,
                                      loff_t* out_offset, size_t count, unsigned int flags) noexcept {
  return static_cast<ssize_t>(
      syscall(SYS_splice, in_fd, in_offset, out_fd, out_offset, count, flags));
};
const decltype(&::poll) poll = raw_poll;
const decltype(&::ppoll) ppoll = raw_ppoll;
const decltype(&::select) select = raw_select;
const decltype(&::pselect) pselect = raw_pselect;
const decltype(&::epoll_create) epoll_create = [](int size) noexcept {
  if (size <= 0) {
    errno = EINVAL;
    return -1;
  }
  return static_cast<int>(syscall(SYS_epoll_create1, 0));
};
const decltype(&::epoll_create1) epoll_create1 = [](int flags) noexcept {
  return static_cast<int>(syscall(SYS_epoll_create1, flags));
};
const decltype(&::epoll_ctl) epoll_ctl = [](int epoll_fd, int operation, int fd,
                                            epoll_event* event) noexcept {
  return static_cast<int>(syscall(SYS_epoll_ctl, epoll_fd, operation, fd, event));
};
const decltype(&::epoll_wait) epoll_wait = [](int epoll_fd, epoll_event* events, int capacity,
                                              int timeout) noexcept {
  return raw_epoll_pwait(epoll_fd, events, capacity, timeout, nullptr);
};
const decltype(&::epoll_pwait) epoll_pwait = raw_epoll_pwait;
const decltype(&::epoll_pwait2) epoll_pwait2 = [](int epoll_fd, epoll_event* events,
                                                  int capacity, const timespec* timeout,
                                                  const sigset_t* mask) noexcept {
  return static_cast<int>(
      syscall(SYS_epoll_pwait2, epoll_fd, events, capacity, timeout, mask, _NSIG / 8));
};
const decltype(&::fcntl) fcntl = raw_fcntl;
const decltype(&::fcntl64) fcntl64 = raw_fcntl;
const decltype(&::ioctl) ioctl = raw_ioctl;
const decltype(&::getsockopt) getsockopt = [](int fd, int level, int name, void* value,
                                              socklen_t* length) noexcept {
  return static_cast<int>(syscall(SYS_getsockopt, fd, level, name, value, length));
};
const decltype(&::setsockopt) setsockopt = [](int fd, int level, int name, const void* value,
                                              socklen_t length) noexcept {
  return static_cast<int>(syscall(SYS_setsockopt, fd, level, name, value, length));
};
const decltype(&::getsockname) getsockname = [](int fd, sockaddr* address, socklen_t* length) noexcept {
  return static_cast<int>(syscall(SYS_getsockname, fd, address, length));
};
const decltype(&::getpeername) getpeername = [](int fd, sockaddr* address, socklen_t* length) noexcept {
  return static_cast<int>(syscall(SYS_getpeername, fd, address, length));
};
const decltype(&::dup) dup = [](int fd) noexcept { return static_cast<int>(syscall(SYS_dup, fd)); };
const decltype(&::dup2) dup2 = raw_dup2;
const decltype(&::dup3) dup3 = [](int old_fd, int new_fd, int flags) noexcept {
  return static_cast<int>(syscall(SYS_dup3, old_fd, new_fd, flags));
};
const decltype(&::fork) fork = []() noexcept {
  // Skips pthread_atfork handlers; only reachable while dlsym runs on this thread.
  return static_cast<pid_t>(syscall(SYS_clone, SIGCHLD, 0, nullptr, nullptr, 0));
};
const decltype(&::execve) execve = raw_execve;
const decltype(&::execv) execv = [](const char* path, char* const argv[]) noexcept {
  return raw_execve(path, argv, environ);
};
const decltype(&::execvp) execvp = [](const char* file, char* const argv[]) noexcept {
  return raw_execve(file, argv, environ);
};
const decltype(&::execvpe) execvpe = [](const char* file, char* const argv[],
                                        char* const envp[]) noexcept {
  return raw_execve(file, argv, envp);
};
const decltype(&::fexecve) fexecve = [](int fd, char* const argv[], char* const envp[]) noexcept {
  return static_cast<int>(syscall(SYS_execveat, fd, "", argv, envp, AT_EMPTY_PATH));
};
const decltype(&::posix_spawn) posix_spawn = raw_posix_spawn;
const decltype(&::posix_spawnp) posix_spawnp = raw_posix_spawn;
const decltype(&::system) system = [](const char*) noexcept {
  errno = ENOSYS;
  return -1;
};
const decltype(&::popen) popen = [](const char*, const char*) noexcept -> FILE* {
  errno = ENOSYS;
  return nullptr;
};
const decltype(&::open) open = raw_open;

}  // namespace qpsock::libc::raw
