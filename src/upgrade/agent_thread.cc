#include "upgrade/agent_thread.h"

#include <pthread.h>
#include <signal.h>

namespace qpsock::upgrade {

int start_agent_thread(const char* name, void (*run)()) {
  // The new thread inherits this mask; ours is put back at once.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_t thread;
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  const int created = pthread_create(
      &thread, &attributes,
      [](void* argument) -> void* {
        reinterpret_cast<void (*)()>(argument)();
        return nullptr;
      },
      reinterpret_cast<void*>(run));
  pthread_attr_destroy(&attributes);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (created == 0) pthread_setname_np(thread, name);
  return created;
}

}  // namespace qpsock::upgrade
