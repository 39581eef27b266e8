// Keeps qpsock loaded across exec: the environment handed to a new program
// carries libqpsock.so in LD_PRELOAD and every QPSOCK_* setting this process
// started with, even when the program built its own environment without them
// (as daemons and the JDK's process launcher may).
#pragma once

#include <cstddef>

namespace qpsock::process {

// Records the library's own path and the QPSOCK_* settings; called once at load.
void capture_inherited_environment();

// The environment to pass to exec: `envp` itself when it already carries what
// must be inherited, else a copy that adds it. Uses only mmap (async-signal-safe),
// because it runs in a forked child of a multi-threaded program.
//
// `inherited_streams` (upgrade/inherited_streams.h: the sockets whose streams
// belong to another process, an assignment, or null) replaces whatever
// QPSOCK_INHERITED_STREAMS `envp` has: the new program learns exactly the
// sockets it inherits now.
class InheritedEnvironment {
 public:
  explicit InheritedEnvironment(char* const* envp, const char* inherited_streams = nullptr);
  ~InheritedEnvironment();
  InheritedEnvironment(const InheritedEnvironment&) = delete;
  InheritedEnvironment& operator=(const InheritedEnvironment&) = delete;

  char* const* get() const { return environment_; }

 private:
  char* const* environment_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
};

}  // namespace qpsock::process
