// The libraries qpsock itself calls make system calls of their own through
// the functions qpsock interposes: libibverbs' provider rings a doorbell with
// write(2) on its device fd at every post (rxe), ibv_get_cq_event read(2)s
// the completion channel. Those are not the program's calls: looked up as
// sockets, they are qpsock re-entering its own wrappers (two lookups per
// message, 4% of its instructions over Soft-RoCE). Calls made inside an
// OwnLibraryCall scope go straight to libc.
#pragma once

namespace qpsock::libc {

// Initial-exec TLS, constant-initialised: a check is one load, never a
// call to __tls_get_addr (which may allocate).
extern constinit __attribute__((tls_model("initial-exec"))) thread_local bool inside_own_library_call;

// Marks this thread as inside a call into one of qpsock's own libraries
// for the scope's lifetime (nests).
class OwnLibraryCall {
 public:
  OwnLibraryCall() : outer_(inside_own_library_call) { inside_own_library_call = true; }
  ~OwnLibraryCall() { inside_own_library_call = outer_; }
  OwnLibraryCall(const OwnLibraryCall&) = delete;
  OwnLibraryCall& operator=(const OwnLibraryCall&) = delete;

 private:
  bool outer_;
};

}  // namespace qpsock::libc
