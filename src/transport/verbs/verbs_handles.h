// RAII owners of the rdma_cm and verbs objects one connection is made of.
// Each frees its object when it goes. Their owners declare them in creation
// order (event channel, cm id, protection domain, completion channel,
// completion queue, queue pair), so they are destroyed in the reverse order
// the verbs require: a QP before its CQ and PD, a CQ before its channel, an id
// before its event channel.
#pragma once

#include <memory>

#include "libc/own_library_calls.h"
#include "transport/verbs/verbs_library.h"

namespace qpsock::transport::verbs {

// The two channels are fds the libraries close with close(2): qpsock's own,
// which need not look for them among the program's sockets.
struct EventChannelDeleter {
  void operator()(rdma_event_channel* channel) const {
    libc::OwnLibraryCall own_call;
    verbs_library().rdma_destroy_event_channel(channel);
  }
};
using EventChannel = std::unique_ptr<rdma_event_channel, EventChannelDeleter>;

// Every event of the id must have been acknowledged (rdma_destroy_id waits for it).
struct CmIdDeleter {
  void operator()(rdma_cm_id* id) const { verbs_library().rdma_destroy_id(id); }
};
using CmId = std::unique_ptr<rdma_cm_id, CmIdDeleter>;

struct CmEventAcknowledger {
  void operator()(rdma_cm_event* event) const { verbs_library().rdma_ack_cm_event(event); }
};
// An event from rdma_get_cm_event, acknowledged when it goes (its private
// data goes with it: copy what must outlive it).
using CmEvent = std::unique_ptr<rdma_cm_event, CmEventAcknowledger>;

struct ProtectionDomainDeleter {
  void operator()(ibv_pd* domain) const { verbs_library().ibv_dealloc_pd(domain); }
};
// Shared: each memory registration keeps its domain alive, so the domain goes
// after the last region registered in it, whatever the order of the owners.
using ProtectionDomain = std::shared_ptr<ibv_pd>;

struct CompletionChannelDeleter {
  void operator()(ibv_comp_channel* channel) const {
    libc::OwnLibraryCall own_call;
    verbs_library().ibv_destroy_comp_channel(channel);
  }
};
using CompletionChannel = std::unique_ptr<ibv_comp_channel, CompletionChannelDeleter>;

// Every event taken from its channel must have been acknowledged.
struct CompletionQueueDeleter {
  void operator()(ibv_cq* queue) const { verbs_library().ibv_destroy_cq(queue); }
};
using CompletionQueue = std::unique_ptr<ibv_cq, CompletionQueueDeleter>;

struct MemoryRegionDeleter {
  void operator()(ibv_mr* region) const { verbs_library().ibv_dereg_mr(region); }
};
using MemoryRegion = std::unique_ptr<ibv_mr, MemoryRegionDeleter>;

// The queue pair rdma_create_qp made on an id (rdma_destroy_qp takes the id,
// which must outlive this).
class QueuePair {
 public:
  QueuePair() = default;
  ~QueuePair() { reset(); }
  QueuePair(QueuePair&& other) noexcept;
  QueuePair& operator=(QueuePair&& other) noexcept;
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

  // rdma_create_qp: 0 or -errno. On success `attributes.cap` holds what the
  // queue pair actually got.
  int create(rdma_cm_id* id, ibv_pd* domain, ibv_qp_init_attr& attributes);
  ibv_qp* get() const { return id_ != nullptr ? id_->qp : nullptr; }
  void reset();

 private:
  rdma_cm_id* id_ = nullptr;
};

}  // namespace qpsock::transport::verbs
