// An owned file descriptor: closed (through the next close, never qpsock's
// own wrapper: close_descriptor) when the owner goes.
#pragma once

#include <utility>

#include "common/own_descriptor.h"
#include "libc/next_symbols.h"

namespace qpsock {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives the fd up without closing it.
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) close_descriptor(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace qpsock
