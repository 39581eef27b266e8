#pragma once

#include <cerrno>

namespace qpsock {

// qpsock's bookkeeping around a successful call must leave errno exactly as the
// application's real call left it.
class ErrnoGuard {
 public:
  ErrnoGuard() : saved_(errno) {}
  ~ErrnoGuard() { errno = saved_; }
  ErrnoGuard(const ErrnoGuard&) = delete;
  ErrnoGuard& operator=(const ErrnoGuard&) = delete;

 private:
  int saved_;
};

}  // namespace qpsock
