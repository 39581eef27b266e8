// VerbsTransport's setup: the verbs objects of one connection on the device
// its rdma_cm id resolved to, the inline-size probe, the receive ring, the
// posted receives, and what the connection negotiated.
#include <sys/epoll.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "common/errno_guard.h"
#include "common/log.h"
#include "common/own_descriptor.h"
#include "libc/next_symbols.h"
#include "transport/verbs/cm_events.h"
#include "transport/verbs/verbs_library.h"
#include "transport/verbs/verbs_transport.h"

namespace qpsock::transport::verbs {
namespace {

// Beyond the options' first choice, the inline sizes tried in turn when the
// device refuses a queue pair (128 B is what IB and RoCE adapters commonly
// take, 32 B iWARP ones).
constexpr std::array<uint32_t, 4> kFallbackInlineSizes = {128, 64, 32, 0};

// rdma_rxe's vendor id (RXE_VENDOR_ID): any name may be given to its devices.
constexpr uint32_t kSoftRoceVendorId = 0xFFFFFF;

int errno_or(int fallback) { return errno != 0 ? -errno : fallback; }

uint32_t clamp_to(uint32_t wanted, int device_limit) {
  return std::min<uint32_t>(wanted, static_cast<uint32_t>(std::max(device_limit, 0)));
}

// The options as the device can grant them (it refuses a queue pair beyond
// its limits, and we would rather have a smaller one than none).
VerbsOptions within_device_limits(VerbsOptions options, const ibv_device_attr& device) {
  options.send_queue_depth = clamp_to(options.send_queue_depth, device.max_qp_wr);
  // The receive queue holds kSpareReceives more than the capacity.
  options.notification_capacity =
      clamp_to(options.notification_capacity, device.max_qp_wr - static_cast<int>(kSpareReceives));
  // Both queues complete into one CQ.
  const uint32_t largest_cq =
      clamp_to(UINT32_MAX, device.max_cqe - static_cast<int>(kSpareReceives));
  if (options.send_queue_depth + options.notification_capacity > largest_cq) {
    options.notification_capacity = std::min(options.notification_capacity, largest_cq / 2);
    options.send_queue_depth = largest_cq - options.notification_capacity;
  }
  options.max_slices = std::min(clamp_to(options.max_slices, device.max_sge), kLargestSlices);
  return options;
}

// IBV_MTU_256 is 1, and each next one doubles.
uint32_t mtu_bytes(ibv_mtu mtu) {
  return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128u << mtu : 0;
}

}  // namespace

int VerbsTransport::create(EventChannel events, CmId id, const VerbsOptions& options,
                           std::unique_ptr<VerbsTransport>& out) {
  if (events == nullptr || id == nullptr || id->verbs == nullptr || !options_valid(options))
    return -EINVAL;
  ErrnoGuard errno_guard;
  auto transport =
      std::make_unique<VerbsTransport>(ConstructionKey{}, std::move(events), std::move(id));
  if (int error = transport->set_up(options); error < 0) return error;
  out = std::move(transport);
  return 0;
}

VerbsTransport::VerbsTransport(ConstructionKey, EventChannel events, CmId id)
    : events_(std::move(events)), id_(std::move(id)) {}

VerbsTransport::~VerbsTransport() {
  ErrnoGuard errno_guard;
  if (queue_pair_.get() != nullptr) disconnect();
}

int VerbsTransport::set_up(const VerbsOptions& requested) {
  ibv_context* context = id_->verbs;
  ibv_device_attr device{};
  if (int error = verbs_library().ibv_query_device(context, &device); error != 0) return -error;
  const VerbsOptions options = within_device_limits(requested, device);
  reads_unreliable_ = device.vendor_id == kSoftRoceVendorId;
  if (!options_valid(options)) return -ENOMEM;
  max_read_length_ = std::min<uint64_t>(options.max_read_length, device.max_mr_size);
  reads_asked_ = static_cast<uint8_t>(
      std::min({options.max_outstanding_reads, 255u, clamp_to(255, device.max_qp_init_rd_atom)}));
  reads_served_ = static_cast<uint8_t>(
      std::min({options.max_outstanding_reads, 255u, clamp_to(255, device.max_qp_rd_atom)}));

  ibv_pd* domain = verbs_library().ibv_alloc_pd(context);
  if (domain == nullptr) return errno_or(-ENOMEM);
  domain_ = ProtectionDomain(domain, ProtectionDomainDeleter{});
  completion_channel_.reset(verbs_library().ibv_create_comp_channel(context));
  if (completion_channel_ == nullptr) return errno_or(-ENOMEM);
  if (int error = place_own_descriptor(completion_channel_->fd); error < 0) return error;
  if (int error = make_nonblocking(completion_channel_->fd); error < 0) return error;
  const int queue_entries = static_cast<int>(options.send_queue_depth +
                                             options.notification_capacity + kSpareReceives);
  completion_queue_.reset(
      verbs_library().ibv_create_cq(context, queue_entries, nullptr, completion_channel_.get(), 0));
  if (completion_queue_ == nullptr) return errno_or(-ENOMEM);
  if (int error = create_queue_pair(options); error < 0) return error;
  if (int error = map_ring(options.ring_size); error < 0) return error;
  if (int error = post_receives(notification_capacity_ + kSpareReceives); error < 0) return error;
  return open_wait_set();
}

int VerbsTransport::create_queue_pair(const VerbsOptions& options) {
  int error = -EINVAL;
  std::optional<uint32_t> last_tried;
  auto try_inline = [&](uint32_t inline_size) {
    if (inline_size > options.max_inline || (last_tried && inline_size >= *last_tried))
      return false;
    last_tried = inline_size;
    ibv_qp_init_attr attributes{};
    attributes.send_cq = completion_queue_.get();
    attributes.recv_cq = completion_queue_.get();
    attributes.qp_type = IBV_QPT_RC;
    attributes.sq_sig_all = 0;  // each post asks for its completion (IBV_SEND_SIGNALED)
    attributes.cap.max_send_wr = options.send_queue_depth;
    attributes.cap.max_recv_wr = options.notification_capacity + kSpareReceives;
    attributes.cap.max_send_sge = options.max_slices;
    attributes.cap.max_recv_sge = 1;  // our receives carry none; some devices refuse 0
    attributes.cap.max_inline_data = inline_size;
    error = queue_pair_.create(id_.get(), domain_.get(), attributes);
    if (error < 0) {
      QPSOCK_LOG(debug, "verbs: %s refused a queue pair with %u inline bytes: %d", device_name(),
                 inline_size, error);
      return false;
    }
    // What the queue pair got, within what the CQ was sized for.
    max_inline_ = attributes.cap.max_inline_data;
    send_queue_depth_ = std::min(attributes.cap.max_send_wr, options.send_queue_depth);
    notification_capacity_ = options.notification_capacity;
    max_slices_ = std::min(attributes.cap.max_send_sge, kLargestSlices);
    ledger_ = PostLedger(send_queue_depth_);
    return true;
  };
  if (try_inline(options.max_inline)) return 0;
  for (uint32_t inline_size : kFallbackInlineSizes)
    if (try_inline(inline_size)) return 0;
  return error;
}

int VerbsTransport::map_ring(uint64_t ring_size) {
  // The peer's rendezvous write requests land in the box after the ring
  // (kHelloRendezvousByWrite), under the ring's key.
  if (int error = ring_.map(ring_size + stream::kRequestBoxSize); error < 0) return error;
  if (int error = VerbsRegistration::create(domain_, ring_.data(), ring_.size(),
                                            stream::MemoryAccess::remote_write, ring_registration_);
      error < 0)
    return error;
  local_endpoint_ = {reinterpret_cast<uint64_t>(ring_.data()), ring_registration_->remote_key(),
                     ring_size, notification_capacity_};
  return 0;
}

int VerbsTransport::post_receives(uint32_t count) {
  // Zero-length: an RDMA WRITE WITH IMM consumes one but writes nothing into it.
  // Each batch fills what it posts and no more.
  std::array<ibv_recv_wr, 32> requests;
  while (count > 0) {
    const uint32_t batch = std::min<uint32_t>(count, requests.size());
    for (uint32_t index = 0; index < batch; ++index)
      requests[index] = {kReceiveWorkRequestId, index + 1 < batch ? &requests[index + 1] : nullptr,
                         nullptr, 0};
    ibv_recv_wr* refused = nullptr;
    if (int error = ibv_post_recv(queue_pair_.get(), requests.data(), &refused); error != 0)
      return -error;
    count -= batch;
  }
  return 0;
}

int VerbsTransport::open_wait_set() {
  wait_set_.reset(keep_own_descriptor(next::epoll_create1(EPOLL_CLOEXEC)));
  if (!wait_set_.valid()) return -errno;
  for (int fd : {completion_channel_->fd, events_->fd}) {
    epoll_event readable{};
    readable.events = EPOLLIN;
    readable.data.fd = fd;
    if (next::epoll_ctl(wait_set_.get(), EPOLL_CTL_ADD, fd, &readable) < 0) return -errno;
  }
  return 0;
}

int VerbsTransport::complete_connection() {
  ibv_qp_attr attributes{};
  ibv_qp_init_attr initial{};
  if (int error = verbs_library().ibv_query_qp(
          queue_pair_.get(), &attributes, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_PATH_MTU, &initial);
      error != 0)
    return -error;
  max_outstanding_reads_ = attributes.max_rd_atomic;
  path_mtu_ = mtu_bytes(attributes.path_mtu);
  // The engine's rendezvous reads the peer's memory: a peer that serves no
  // reads cannot carry a stream.
  if (max_outstanding_reads_ == 0) return -EPROTO;
  QPSOCK_LOG(debug,
             "verbs: connected on %s: inline %zu, send queue %u, receives %u, reads %u, slices %u, "
             "path MTU %u",
             device_name(), max_inline_, send_queue_depth_, notification_capacity_,
             max_outstanding_reads_, max_slices_, path_mtu_);
  return 0;
}

const char* VerbsTransport::device_name() const {
  if (id_ == nullptr || id_->verbs == nullptr) return "?";
  return verbs_library().ibv_get_device_name(id_->verbs->device);
}

}  // namespace qpsock::transport::verbs
