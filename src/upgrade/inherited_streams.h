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

namespace qpsock::upgrade {

inline constexpr char kInheritedStreamsName[] = "QPSOCK_INHERITED_STREAMS";

// "QPSOCK_INHERITED_STREAMS=INODE,INODE,..." in memory of its own, mapped
// with mmap and grown with mremap, never malloc'ed: exec runs in forked
// children of multi-threaded programs, where malloc may be locked. Names
// every socket it is given (a server may have thousands of connections when
// it runs system()), up to what one environment string may hold (128 KiB:
// about 6000); if that is reached or the memory cannot grow, the rest are
// left out and one line says so.
class InheritedStreamsMarker {
 public:
  InheritedStreamsMarker() = default;
  ~InheritedStreamsMarker();
  InheritedStreamsMarker(const InheritedStreamsMarker&) = delete;
  InheritedStreamsMarker& operator=(const InheritedStreamsMarker&) = delete;

  // Names the socket with `inode`.
  void add(uint64_t inode);
  // The assignment to put in the new program's environment; null if empty.
  const char* assignment() const { return count_ > 0 ? text_ : nullptr; }
  size_t count() const { return count_; }

 private:
  // Room for `bytes` more characters and the terminating null.
  bool make_room(size_t bytes);

  char* text_ = nullptr;
  size_t capacity_ = 0;  // bytes mapped at text_
  size_t length_ = 0;
  size_t count_ = 0;
  bool full_ = false;  // the memory could not grow: the rest were left out
};

// At load, in the new program: every fd that is one of the sockets the
// environment names gets a Connection that refuses its calls, and the
// variable leaves the environment (the exec wrapper names them again for a
// program this one starts).
void adopt_inherited_streams();

}  // namespace qpsock::upgrade
