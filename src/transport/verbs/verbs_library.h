// libibverbs and librdmacm, loaded with dlopen when the first connection
// could take the RDMA path, not linked: linked, they and libnl (which
// libibverbs needs) were loaded, relocated and initialised in every process
// qpsock runs in, +0.84 ms per start of /bin/true, RDMA or not
// (docs/performance.md). A host without RDMA devices never loads them; one
// without the libraries stays on TCP with one line saying why.
//
// The engine calls every exported verbs and rdma_cm function through
// verbs_library(). The header-inline ones need no symbol: ibv_post_send,
// ibv_poll_cq and ibv_req_notify_cq call through the device's context,
// rdma_get_local_addr and rdma_get_peer_addr read the id. Linking
// libqpsock.so with -z defs keeps it so: a direct call fails the build.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

namespace qpsock::transport::verbs {

// X(name, version): each function the engine calls, with the symbol version
// the linker would bind (nm -D of the libraries).
#define QPSOCK_FOR_EACH_VERBS_FUNCTION(X)                                                  \
  X(ibv_ack_cq_events, "IBVERBS_1.1") X(ibv_alloc_pd, "IBVERBS_1.1")                      \
  X(ibv_create_comp_channel, "IBVERBS_1.0") X(ibv_create_cq, "IBVERBS_1.1")               \
  X(ibv_dealloc_pd, "IBVERBS_1.1") X(ibv_dereg_mr, "IBVERBS_1.1")                         \
  X(ibv_destroy_comp_channel, "IBVERBS_1.0") X(ibv_destroy_cq, "IBVERBS_1.1")             \
  X(ibv_get_cq_event, "IBVERBS_1.1") X(ibv_get_device_name, "IBVERBS_1.1")                \
  X(ibv_modify_qp, "IBVERBS_1.1") X(ibv_query_device, "IBVERBS_1.1")                      \
  X(ibv_query_qp, "IBVERBS_1.1") X(ibv_reg_mr_iova2, "IBVERBS_1.8")                       \
  X(ibv_wc_status_str, "IBVERBS_1.1")
#define QPSOCK_FOR_EACH_RDMA_CM_FUNCTION(X)                                                \
  X(rdma_accept, "RDMACM_1.0") X(rdma_ack_cm_event, "RDMACM_1.0")                         \
  X(rdma_bind_addr, "RDMACM_1.0") X(rdma_connect, "RDMACM_1.0")                           \
  X(rdma_create_event_channel, "RDMACM_1.0") X(rdma_create_id, "RDMACM_1.0")              \
  X(rdma_create_qp, "RDMACM_1.0") X(rdma_destroy_event_channel, "RDMACM_1.0")             \
  X(rdma_destroy_id, "RDMACM_1.0") X(rdma_destroy_qp, "RDMACM_1.0")                       \
  X(rdma_disconnect, "RDMACM_1.0") X(rdma_event_str, "RDMACM_1.0")                        \
  X(rdma_get_cm_event, "RDMACM_1.0") X(rdma_get_src_port, "RDMACM_1.0")                   \
  X(rdma_listen, "RDMACM_1.0") X(rdma_migrate_id, "RDMACM_1.0")                           \
  X(rdma_reject, "RDMACM_1.0") X(rdma_resolve_addr, "RDMACM_1.0")                         \
  X(rdma_resolve_route, "RDMACM_1.0")

// One pointer per function, named as the function.
struct VerbsLibrary {
#define QPSOCK_DECLARE_VERBS_POINTER(name, version) decltype(&::name) name = nullptr;
  QPSOCK_FOR_EACH_VERBS_FUNCTION(QPSOCK_DECLARE_VERBS_POINTER)
  QPSOCK_FOR_EACH_RDMA_CM_FUNCTION(QPSOCK_DECLARE_VERBS_POINTER)
#undef QPSOCK_DECLARE_VERBS_POINTER
};

// Loads both libraries and resolves every function, once per process: the
// first caller loads, callers on other threads wait for it, later calls cost
// one atomic load. False, with the loader's reason logged once at warn
// level, when either library or any function is missing, and for a caller
// that interrupts the load on its own thread (a signal handler: the
// connection stays on TCP). Leaves errno as it was.
bool verbs_library_loaded();

// The functions. Only after verbs_library_loaded() returned true: every verbs
// object exists because a call through here made it.
const VerbsLibrary& verbs_library();

// In a child just forked: a load that a thread of the parent had under way
// did not come along; the child's first caller loads again.
void verbs_library_after_fork_in_child();

}  // namespace qpsock::transport::verbs
