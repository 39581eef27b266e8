#include "common/helper_thread.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <cstdint>

#include "common/own_descriptor.h"
#include "libc/next_symbols.h"

namespace qpsock {

int start_helper_thread(const char* name, void (*run)()) {
  return start_helper_thread(
      name,
      [](void* argument) -> void* {
        reinterpret_cast<void (*)()>(argument)();
        return nullptr;
      },
      reinterpret_cast<void*>(run));
}

int start_helper_thread(const char* name, void* (*entry)(void*), void* argument) {
  // The new thread inherits this mask; ours is put back at once.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_t thread;
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  // Joinable until named: a detached thread that ends at once (a short
  // attempt) may have its descriptor reused by the next thread made, which
  // the name would then go to.
  const int created = pthread_create(&thread, &attributes, entry, argument);
  pthread_attr_destroy(&attributes);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (created == 0) {
    pthread_setname_np(thread, name);
    pthread_detach(thread);
  }
  return created;
}

int HelperWakeup::open() {
  fd_ = keep_own_descriptor(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  return fd_ >= 0 ? 0 : -errno;
}

void HelperWakeup::close() {
  if (fd_ >= 0) close_descriptor(fd_);
  fd_ = -1;
}

void HelperWakeup::signal() const {
  const uint64_t one = 1;
  // Cannot fail short of a full counter, which the sleeper empties constantly.
  (void)!next::write(fd_, &one, sizeof(one));
}

void HelperWakeup::sleep(int timeout_ms) const {
  pollfd readable{fd_, POLLIN, 0};
  next::poll(&readable, 1, timeout_ms);
  uint64_t count;
  (void)!next::read(fd_, &count, sizeof(count));
}

}  // namespace qpsock
