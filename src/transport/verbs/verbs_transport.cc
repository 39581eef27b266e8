// VerbsTransport's data path: registrations, posts, polls, arming and
// breaking the link. Setup is in verbs_transport_setup.cc.
#include "transport/verbs/verbs_transport.h"

#include <arpa/inet.h>
#include <time.h>

#include <array>
#include <cerrno>
#include <utility>

#include "common/errno_guard.h"
#include "common/log.h"
#include "libc/next_symbols.h"
#include "libc/own_library_calls.h"
#include "transport/verbs/verbs_library.h"

namespace qpsock::transport::verbs {

using stream::Completion;
using stream::CompletionKind;
using stream::LocalSlice;
using stream::MemoryAccess;
using stream::MemoryRegistration;
using stream::RemoteRegion;
using stream::kFlushedStatus;

namespace {


// One post's scatter/gather list.
struct ScatterGather {
  std::array<ibv_sge, kLargestSlices> entries;
  int count = 0;
  uint64_t length = 0;
  bool sent_inline = false;
};

// Fills `list` from `slices` (empty ones are left out). Up to `max_inline`
// bytes in all are sent inline and need no registration; anything else must
// lie in a registration. 0, or -EINVAL / -EFAULT.
int gather(std::span<const LocalSlice> slices, uint32_t max_slices, size_t max_inline,
           ScatterGather& list) {
  if (slices.size() > max_slices) return -EINVAL;
  for (const LocalSlice& slice : slices) list.length += slice.length;
  list.sent_inline = list.length > 0 && list.length <= max_inline;
  for (const LocalSlice& slice : slices) {
    if (slice.length == 0) continue;
    uint32_t local_key = 0;
    if (!list.sent_inline) {
      if (slice.registration == nullptr || !slice.registration->covers(slice.address, slice.length))
        return -EFAULT;
      local_key = slice.registration->local_key();
    }
    list.entries[list.count++] = {reinterpret_cast<uint64_t>(slice.address),
                                  static_cast<uint32_t>(slice.length), local_key};
  }
  return 0;
}

int64_t coarse_now() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

}  // namespace

int VerbsTransport::map_receive_ring(size_t length, stream::MappedMemory& ring) {
  std::lock_guard lock(ring_mutex_);
  if (ring_.empty()) return -EBUSY;  // handed over already
  // Without the request box (a peer that reads its rendezvous) the stream
  // asks for the ring alone; the box then goes with it, unused.
  if (length != ring_.size() && length != ring_.size() - stream::kRequestBoxSize) return -EINVAL;
  ring = std::move(ring_);
  return 0;
}

int VerbsTransport::register_memory(void* address, size_t length, MemoryAccess access,
                                    std::unique_ptr<MemoryRegistration>& registration) {
  if (address == nullptr || length == 0) return -EINVAL;
  ErrnoGuard errno_guard;
  {
    // The ring's registration was made at setup (its key is in the peer's hands).
    std::lock_guard lock(ring_mutex_);
    if (ring_registration_ != nullptr && access == MemoryAccess::remote_write &&
        address == ring_registration_->address() && length == ring_registration_->length()) {
      registration = std::move(ring_registration_);
      return 0;
    }
  }
  std::unique_ptr<VerbsRegistration> made;
  if (int error = VerbsRegistration::create(domain_, address, length, access, made); error < 0)
    return error;
  registration = std::move(made);
  return 0;
}

int VerbsTransport::post_write(std::span<const LocalSlice> source, RemoteRegion destination,
                               std::optional<uint32_t> immediate, uint64_t cookie) {
  if (broken_) return kFlushedStatus;
  ScatterGather list;
  if (int error = gather(source, max_slices_, max_inline_, list); error < 0) return error;
  ibv_send_wr request{};
  request.sg_list = list.count > 0 ? list.entries.data() : nullptr;
  request.num_sge = list.count;
  request.opcode = immediate ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  request.send_flags = IBV_SEND_SIGNALED | (list.sent_inline ? IBV_SEND_INLINE : 0);
  if (immediate) request.imm_data = htonl(*immediate);
  request.wr.rdma.remote_addr = destination.address;
  request.wr.rdma.rkey = destination.key;
  return submit(request, {CompletionKind::write_done, cookie});
}

int VerbsTransport::post_read(std::span<const LocalSlice> destination, RemoteRegion source,
                              uint64_t cookie) {
  if (broken_) return kFlushedStatus;
  ScatterGather list;
  // Reads land in registered memory: nothing is inline.
  if (int error = gather(destination, max_slices_, 0, list); error < 0) return error;
  if (list.length == 0) return -EINVAL;
  ibv_send_wr request{};
  request.sg_list = list.entries.data();
  request.num_sge = list.count;
  request.opcode = IBV_WR_RDMA_READ;
  request.send_flags = IBV_SEND_SIGNALED;
  request.wr.rdma.remote_addr = source.address;
  request.wr.rdma.rkey = source.key;
  return submit(request, {CompletionKind::read_done, cookie});
}

int VerbsTransport::submit(ibv_send_wr& request, const PostLedger::Entry& entry) {
  if (ledger_.full()) return -ENOMEM;
  // A provider may ring its doorbell with a system call: the application's
  // errno stays as it was.
  ErrnoGuard errno_guard;
  request.wr_id = ledger_.next_id();
  ibv_send_wr* refused = nullptr;
  libc::OwnLibraryCall own_call;
  // ibv_post_send returns an errno value (and may leave errno alone).
  if (int error = ibv_post_send(queue_pair_.get(), &request, &refused); error != 0) return -error;
  ledger_.push(entry);
  return 0;
}

int VerbsTransport::poll(std::span<Completion> completions) {
  ErrnoGuard errno_guard;
  consume_wakeups();
  std::array<ibv_wc, 32> polled;
  size_t count = 0;
  // Each work completion yields at most one of ours, so polling no more than
  // there is room for never loses one.
  while (count < completions.size()) {
    const int room = static_cast<int>(std::min(polled.size(), completions.size() - count));
    const int got = ibv_poll_cq(completion_queue_.get(), room, polled.data());
    if (got < 0) {
      QPSOCK_LOG(warn, "verbs: polling the completion queue on %s failed: %d", device_name(), got);
      break_link();
      return count > 0 ? static_cast<int>(count) : -EIO;
    }
    for (int index = 0; index < got; ++index)
      if (translate(polled[index], completions[count])) ++count;
    if (got < room) break;
  }
  replace_consumed_receives();
  return static_cast<int>(count);
}

int VerbsTransport::poll_for_exit(std::span<Completion> completions) {
  // ibv_poll_cq alone: the CM's events (rdma_get_cm_event allocates), the
  // receives' re-post and the error state are left to the process's end.
  std::array<ibv_wc, 16> polled;
  const int room = static_cast<int>(std::min(polled.size(), completions.size()));
  const int got = ibv_poll_cq(completion_queue_.get(), room, polled.data());
  if (got < 0) return -EIO;
  int count = 0;
  for (int index = 0; index < got; ++index) {
    const ibv_wc& work = polled[index];
    PostLedger::Entry post{CompletionKind::arrived, 0};
    if (work.wr_id != kReceiveWorkRequestId && !ledger_.pop(work.wr_id, post)) return -EIO;
    const int status = work.status == IBV_WC_SUCCESS ? 0 : kFlushedStatus;
    const uint32_t immediate = post.kind == CompletionKind::arrived ? ntohl(work.imm_data) : 0;
    completions[count++] = {post.kind, status, post.cookie, immediate};
  }
  return count;
}

void VerbsTransport::replace_consumed_receives() {
  // One post for kSpareReceives or more consumed receives, before the engine
  // sees the messages of those this poll consumed and can give their slots
  // back to the peer: fewer than kSpareReceives consumed leave at least the
  // notification capacity posted.
  if (consumed_receives_ < kSpareReceives || broken_) return;
  const uint32_t consumed = std::exchange(consumed_receives_, 0);
  if (int error = post_receives(consumed); error < 0) {
    QPSOCK_LOG(warn, "verbs: re-posting receives on %s failed: %d", device_name(), error);
    break_link();
  }
}

bool VerbsTransport::translate(const ibv_wc& work, Completion& completion) {
  if (work.wr_id == kReceiveWorkRequestId) return translate_receive(work, completion);
  PostLedger::Entry post;
  if (!ledger_.pop(work.wr_id, post)) {
    QPSOCK_LOG(error, "verbs: a completion on %s for no post of ours (id %llu)", device_name(),
               static_cast<unsigned long long>(work.wr_id));
    break_link();
    return false;
  }
  int status = 0;
  if (work.status != IBV_WC_SUCCESS) {
    note_failure(work);
    status = kFlushedStatus;
  }
  completion = {post.kind, status, post.cookie, 0};
  return true;
}

bool VerbsTransport::translate_receive(const ibv_wc& work, Completion& completion) {
  if (work.status == IBV_WC_SUCCESS && work.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
      (work.wc_flags & IBV_WC_WITH_IMM) != 0) {
    ++consumed_receives_;  // replaced before poll returns
    completion = {CompletionKind::arrived, 0, 0, ntohl(work.imm_data)};
    return true;
  }
  if (work.status == IBV_WC_SUCCESS)
    QPSOCK_LOG(warn, "verbs: the peer on %s sent a message we never expect (opcode %d)",
               device_name(), work.opcode);
  else
    note_failure(work);
  break_link();
  // The flushed receives are not posts of the engine's: one error says it all.
  if (std::exchange(receive_failure_reported_, true)) return false;
  completion = {CompletionKind::arrived, kFlushedStatus, 0, 0};
  return true;
}

void VerbsTransport::note_failure(const ibv_wc& work) {
  // The first failure says why; the flushes that follow it say nothing new,
  // unless nothing of ours moved the queue pair to the error state first.
  if (!std::exchange(failure_logged_, true) && (work.status != IBV_WC_WR_FLUSH_ERR || !broken_))
    QPSOCK_LOG(info, "verbs: connection on %s failed: %s (vendor error %u)",
               device_name(), verbs_library().ibv_wc_status_str(work.status), work.vendor_err);
  break_link();
}

void VerbsTransport::consume_wakeups() {
  if (completion_armed_) {
    libc::OwnLibraryCall own_call;
    ibv_cq* queue = nullptr;
    void* context = nullptr;
    while (verbs_library().ibv_get_cq_event(completion_channel_.get(), &queue, &context) == 0) {
      verbs_library().ibv_ack_cq_events(queue, 1);
      completion_armed_ = false;
    }
  }
  if (cm_check_due()) consume_cm_events();
}

bool VerbsTransport::cm_check_due() {
  // After an arm (the caller may have slept, and the CM's fd may be what woke
  // it), and on the busy path once per tick of the coarse clock: each look
  // is a system call. Even the clock is read only every kPollsPerClockRead
  // polls (it cost a tenth of an empty poll).
  if (std::exchange(cm_check_requested_, false)) return true;
  if (++polls_since_clock_read_ < kPollsPerClockRead) return false;
  polls_since_clock_read_ = 0;
  const int64_t now = coarse_now();
  if (now == cm_checked_at_) return false;
  cm_checked_at_ = now;
  return true;
}

void VerbsTransport::consume_cm_events() {
  // Almost every look finds nothing: ask the fd first, since rdma_get_cm_event
  // allocates and frees an event around its system call even then.
  pollfd channel{events_->fd, POLLIN, 0};
  if (next::poll(&channel, 1, 0) != 1) return;
  rdma_cm_event* raw = nullptr;
  while (verbs_library().rdma_get_cm_event(events_.get(), &raw) == 0) {
    const CmEvent event(raw);
    switch (event->event) {
      case RDMA_CM_EVENT_DISCONNECTED:
      case RDMA_CM_EVENT_DEVICE_REMOVAL:
        if (!broken_)
          QPSOCK_LOG(debug, "verbs: %s on %s", verbs_library().rdma_event_str(event->event),
                     device_name());
        if (event->event == RDMA_CM_EVENT_DISCONNECTED && !disconnected_) peer_left_ = true;
        // The error state flushes everything: the engine learns it from a completion.
        break_link();
        break;
      default:  // TIMEWAIT_EXIT, ADDR_CHANGE: nothing to do
        break;
    }
  }
}

int VerbsTransport::arm() {
  ErrnoGuard errno_guard;
  libc::OwnLibraryCall own_call;
  if (int error = ibv_req_notify_cq(completion_queue_.get(), 0); error != 0) return -error;
  completion_armed_ = true;
  cm_check_requested_ = true;
  return 0;
}

void VerbsTransport::break_link() {
  if (std::exchange(broken_, true)) return;
  ibv_qp_attr attributes{};
  attributes.qp_state = IBV_QPS_ERR;
  if (int error = verbs_library().ibv_modify_qp(queue_pair_.get(), &attributes, IBV_QP_STATE);
      error != 0)
    QPSOCK_LOG(warn, "verbs: moving the queue pair on %s to the error state failed: %d",
               device_name(), error);
}

void VerbsTransport::disconnect() {
  if (std::exchange(disconnected_, true)) return;
  ErrnoGuard errno_guard;
  // The error state first: from here the peer can no longer touch our memory.
  break_link();
  // A DREQ, or the DREP to the peer's (fails harmlessly if the CM is past that).
  verbs_library().rdma_disconnect(id_.get());
}

}  // namespace qpsock::transport::verbs
