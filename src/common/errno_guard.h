#pragma once

#include <cerrno>

namespace qpsock {

// qpsock's bookkeeping around a successful call must leave errno exactly as the
// application's real call left it. Written back only if it changed: after a
// fork, a write to the thread's errno is a copy-on-write fault.
class ErrnoGuard {
 public:
  ErrnoGuard() : saved_(errno) {}
  ~ErrnoGuard() {
    if (errno != saved_) errno = saved_;
  }
  ErrnoGuard(const ErrnoGuard&) = delete;
  ErrnoGuard& operator=(const ErrnoGuard&) = delete;

 private:
  int saved_;
};

}  // namespace qpsock
