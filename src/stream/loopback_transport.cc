#include "stream/loopback_transport.h"

#include "stream/loopback_link.h"

namespace qpsock::stream {

int LoopbackTransport::make_pair(const LoopbackOptions& options,
                                 std::unique_ptr<LoopbackTransport>& first,
                                 std::unique_ptr<LoopbackTransport>& second) {
  auto link = std::make_shared<LoopbackLink>(options);
  if (int error = link->open_event_fds(); error < 0) return error;
  first = std::make_unique<LoopbackTransport>(link, 0);
  second = std::make_unique<LoopbackTransport>(link, 1);
  return 0;
}

LoopbackTransport::LoopbackTransport(std::shared_ptr<LoopbackLink> link, int side)
    : link_(std::move(link)), side_(side) {}

// The peer sees its end go away as a torn-down QP would show it.
LoopbackTransport::~LoopbackTransport() { link_->break_link(); }

int LoopbackTransport::register_memory(void* address, size_t length, MemoryAccess access,
                                       std::unique_ptr<MemoryRegistration>& registration) {
  return link_->register_memory(side_, address, length, access, registration);
}

int LoopbackTransport::post_write(std::span<const LocalSlice> source, RemoteRegion destination,
                                  std::optional<uint32_t> immediate, uint64_t cookie) {
  return link_->post_write(side_, source, destination, immediate, cookie);
}

int LoopbackTransport::post_read(std::span<const LocalSlice> destination, RemoteRegion source,
                                 uint64_t cookie) {
  return link_->post_read(side_, destination, source, cookie);
}

int LoopbackTransport::poll(std::span<Completion> completions) {
  return link_->poll(side_, completions);
}

int LoopbackTransport::wait_handle() const { return link_->event_fd(side_); }
int LoopbackTransport::arm() { return link_->arm(side_); }
void LoopbackTransport::disconnect() { link_->break_link(); }
size_t LoopbackTransport::max_inline() const { return link_->options().max_inline; }
uint32_t LoopbackTransport::max_outstanding_reads() const {
  return link_->options().max_outstanding_reads;
}
uint32_t LoopbackTransport::send_queue_depth() const { return link_->options().send_queue_depth; }
uint32_t LoopbackTransport::notification_capacity() const {
  return link_->options().notification_capacity;
}
uint32_t LoopbackTransport::max_slices() const { return link_->options().max_slices; }
uint64_t LoopbackTransport::max_read_length() const { return link_->options().max_read_length; }

void LoopbackTransport::inject(const LoopbackFaults& faults) { link_->inject(side_, faults); }
void LoopbackTransport::drop_link() { link_->break_link(); }
void LoopbackTransport::peer_leaves() {
  peer_left_.store(true, std::memory_order_release);
  link_->break_link();
}
bool LoopbackTransport::link_broken() const { return link_->broken(); }
LoopbackStatistics LoopbackTransport::statistics() const { return link_->statistics(side_); }

}  // namespace qpsock::stream
