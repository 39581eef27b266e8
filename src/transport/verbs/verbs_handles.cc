#include "transport/verbs/verbs_handles.h"

#include <cerrno>
#include <utility>

#include "transport/verbs/verbs_library.h"

namespace qpsock::transport::verbs {

QueuePair::QueuePair(QueuePair&& other) noexcept : id_(std::exchange(other.id_, nullptr)) {}

QueuePair& QueuePair::operator=(QueuePair&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = std::exchange(other.id_, nullptr);
  }
  return *this;
}

int QueuePair::create(rdma_cm_id* id, ibv_pd* domain, ibv_qp_init_attr& attributes) {
  reset();
  if (verbs_library().rdma_create_qp(id, domain, &attributes) != 0)
    return errno != 0 ? -errno : -EINVAL;
  id_ = id;
  return 0;
}

void QueuePair::reset() {
  if (id_ != nullptr) verbs_library().rdma_destroy_qp(id_);
  id_ = nullptr;
}

}  // namespace qpsock::transport::verbs
