// Sockets that a new program inherits from a process whose streams it cannot
// use: the exec of a forked child whose parent had upgraded them, or a
// program started beside an upgraded connection's process by posix_spawn,
// system or popen (docs/upgrade-protocol.md, "fork"). Their bytes move in
// the other process's stream, and what a new program would read from the
// kernel's socket is nothing, or qpsock's binding token. The exec and spawn
// wrappers name them in the new program's environment; the new program's
// qpsock refuses every call on them with ECONNRESET.
#pragma once

#include <cstddef>
#include <cstdint>

#include "stream/mapped_memory.h"

namespace qpsock::upgrade {

inline constexpr char kInheritedStreamsName[] = "QPSOCK_INHERITED_STREAMS";

// "QPSOCK_INHERITED_STREAMS=INODE,INODE,..." in memory of its own (mmap,
// never malloc: exec runs in forked children of multi-threaded programs,
// where malloc may be locked). Names every socket it is given (a server may
// have thousands of connections when it runs system()), up to what one
// environment string may hold (128 KiB: about 6000); past that, or if the
// memory cannot be mapped, the rest are left out and one line says so.
class InheritedStreamsMarker {
 public:
  // Names the socket with `inode`.
  void add(uint64_t inode);
  // The assignment to put in the new program's environment; null if empty.
  const char* assignment() const {
    return count_ > 0 ? reinterpret_cast<const char*>(memory_.data()) : nullptr;
  }
  size_t count() const { return count_; }

 private:
  stream::MappedMemory memory_;
  size_t length_ = 0;
  size_t count_ = 0;
  bool full_ = false;  // the rest were left out
};

// At load, in the new program: every fd that is one of the sockets the
// environment names gets a Connection that refuses its calls, and the
// variable leaves the environment (the exec wrapper names them again for a
// program this one starts).
void adopt_inherited_streams();

}  // namespace qpsock::upgrade
