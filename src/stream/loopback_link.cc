#include "stream/loopback_link.h"

#include <sys/eventfd.h>

#include <cerrno>
#include <cstring>

#include "common/own_descriptor.h"
#include "libc/next_symbols.h"

namespace qpsock::stream {
namespace {

class LoopbackRegistration final : public MemoryRegistration {
 public:
  LoopbackRegistration(std::shared_ptr<LoopbackLink> link, int side, std::byte* address,
                       size_t length, uint32_t key, MemoryAccess access)
      : MemoryRegistration(address, length, key, key, access), link_(std::move(link)),
        side_(side) {}
  ~LoopbackRegistration() override { link_->deregister(side_, local_key()); }

 private:
  std::shared_ptr<LoopbackLink> link_;
  int side_;
};

size_t total_length(std::span<const LocalSlice> slices) {
  size_t total = 0;
  for (const LocalSlice& slice : slices) total += slice.length;
  return total;
}

}  // namespace

LoopbackLink::~LoopbackLink() {
  for (End& end : ends_)
    if (end.event_fd >= 0) close_descriptor(end.event_fd);
}

int LoopbackLink::open_event_fds() {
  for (End& end : ends_) {
    end.event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (end.event_fd < 0) return -errno;
  }
  return 0;
}

int LoopbackLink::register_memory(int side, void* address, size_t length, MemoryAccess access,
                                  std::unique_ptr<MemoryRegistration>& registration) {
  if (address == nullptr || length == 0) return -EINVAL;
  uint32_t key;
  {
    std::lock_guard lock(mutex_);
    key = next_key_++;
    ends_[side].regions[key] = Region{static_cast<std::byte*>(address), length, access};
  }
  registration = std::make_unique<LoopbackRegistration>(
      shared_from_this(), side, static_cast<std::byte*>(address), length, key, access);
  return 0;
}

void LoopbackLink::deregister(int side, uint32_t key) {
  std::lock_guard lock(mutex_);
  ends_[side].regions.erase(key);
}

int LoopbackLink::admit_post(End& end, size_t slice_count) {
  if (end.posts_until_failure && --*end.posts_until_failure == 0) {
    end.posts_until_failure.reset();
    return -EIO;
  }
  if (slice_count > options_.max_slices) return -EINVAL;
  if (end.posts_outstanding >= options_.send_queue_depth) return -ENOMEM;
  ++end.posts_outstanding;
  return 0;
}

bool LoopbackLink::completion_fails(End& end) {
  if (!end.completions_until_failure) return false;
  if (*end.completions_until_failure > 0) {
    --*end.completions_until_failure;
    return false;
  }
  return true;
}

const LoopbackLink::Region* LoopbackLink::find_region(const End& end, uint32_t key,
                                                      const void* address, size_t length,
                                                      std::optional<MemoryAccess> access) const {
  auto found = end.regions.find(key);
  if (found == end.regions.end()) return nullptr;
  const Region& region = found->second;
  if (access && region.access != *access) return nullptr;
  auto* begin = static_cast<const std::byte*>(address);
  if (begin < region.address || length > region.length ||
      static_cast<size_t>(begin - region.address) > region.length - length)
    return nullptr;
  return &region;
}

bool LoopbackLink::local_slices_registered(const End& end,
                                           std::span<const LocalSlice> slices) const {
  for (const LocalSlice& slice : slices) {
    if (slice.length == 0) continue;
    if (slice.registration == nullptr) return false;
    if (!find_region(end, slice.registration->local_key(), slice.address, slice.length,
                     std::nullopt))
      return false;
  }
  return true;
}

void LoopbackLink::complete(End& end, Completion completion) {
  end.completions.push_back(completion);
  if (end.armed) {
    end.armed = false;
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t written = next::write(end.event_fd, &one, sizeof(one));
  }
}

int LoopbackLink::post_write(int side, std::span<const LocalSlice> source,
                             RemoteRegion destination, std::optional<uint32_t> immediate,
                             uint64_t cookie) {
  std::lock_guard lock(mutex_);
  End& end = ends_[side];
  End& peer = ends_[1 - side];
  if (int error = admit_post(end, source.size()); error < 0) return error;
  const size_t length = total_length(source);
  const bool copied_inline = length <= options_.max_inline;
  if (broken_) {
    complete(end, {CompletionKind::write_done, kFlushedStatus, cookie, 0});
    return 0;
  }
  const Region* target =
      length == 0 ? nullptr
                  : find_region(peer, destination.key, reinterpret_cast<void*>(destination.address),
                                length, MemoryAccess::remote_write);
  const bool valid = (copied_inline || local_slices_registered(end, source)) &&
                     (length == 0 || target != nullptr);
  const bool receiver_ready = !immediate || peer.unpolled_arrivals < options_.notification_capacity;
  if (completion_fails(end) || !valid || !receiver_ready) {
    complete(end, {CompletionKind::write_done, valid ? -EIO : -EFAULT, cookie, 0});
    break_link_locked();
    return 0;
  }
  auto* into = reinterpret_cast<std::byte*>(destination.address);
  for (const LocalSlice& slice : source) {
    if (slice.length == 0) continue;
    std::memcpy(into, slice.address, slice.length);
    into += slice.length;
  }
  end.statistics.writes += 1;
  end.statistics.inline_writes += copied_inline ? 1 : 0;
  end.statistics.bytes_written += length;
  if (immediate) {
    end.statistics.immediates_sent += 1;
    ++peer.unpolled_arrivals;
    complete(peer, {CompletionKind::arrived, 0, 0, *immediate});
  }
  complete(end, {CompletionKind::write_done, 0, cookie, 0});
  return 0;
}

int LoopbackLink::post_read(int side, std::span<const LocalSlice> destination,
                            RemoteRegion source, uint64_t cookie) {
  std::lock_guard lock(mutex_);
  End& end = ends_[side];
  End& peer = ends_[1 - side];
  if (int error = admit_post(end, destination.size()); error < 0) return error;
  if (broken_) {
    complete(end, {CompletionKind::read_done, kFlushedStatus, cookie, 0});
    return 0;
  }
  const size_t length = total_length(destination);
  const Region* origin =
      length == 0 ? nullptr
                  : find_region(peer, source.key, reinterpret_cast<void*>(source.address), length,
                                MemoryAccess::remote_read);
  const bool valid = length > 0 && length <= options_.max_read_length && origin != nullptr &&
                     local_slices_registered(end, destination);
  if (completion_fails(end) || !valid) {
    complete(end, {CompletionKind::read_done, valid ? -EIO : -EFAULT, cookie, 0});
    break_link_locked();
    return 0;
  }
  const auto* from = reinterpret_cast<const std::byte*>(source.address);
  for (const LocalSlice& slice : destination) {
    if (slice.length == 0) continue;
    std::memcpy(slice.address, from, slice.length);
    from += slice.length;
  }
  end.statistics.reads += 1;
  end.statistics.bytes_read += length;
  complete(end, {CompletionKind::read_done, 0, cookie, 0});
  return 0;
}

int LoopbackLink::poll(int side, std::span<Completion> completions) {
  std::lock_guard lock(mutex_);
  End& end = ends_[side];
  uint64_t drained;
  while (next::read(end.event_fd, &drained, sizeof(drained)) > 0) {
  }
  size_t count = 0;
  while (count < completions.size() && !end.completions.empty()) {
    const Completion completion = end.completions.front();
    end.completions.pop_front();
    if (completion.kind == CompletionKind::arrived) {
      if (completion.status == 0) --end.unpolled_arrivals;
    } else {
      --end.posts_outstanding;
    }
    completions[count++] = completion;
  }
  return static_cast<int>(count);
}

int LoopbackLink::arm(int side) {
  std::lock_guard lock(mutex_);
  End& end = ends_[side];
  end.armed = true;
  if (!end.completions.empty()) {
    // Already something to poll: wake the waiter at once.
    end.armed = false;
    const uint64_t one = 1;
    if (next::write(end.event_fd, &one, sizeof(one)) < 0 && errno != EAGAIN) return -errno;
  }
  return 0;
}

void LoopbackLink::inject(int side, const LoopbackFaults& faults) {
  std::lock_guard lock(mutex_);
  End& end = ends_[side];
  end.posts_until_failure = faults.fail_post_number;
  end.completions_until_failure = faults.fail_completions_after;
}

void LoopbackLink::break_link() {
  std::lock_guard lock(mutex_);
  break_link_locked();
}

void LoopbackLink::break_link_locked() {
  if (broken_) return;
  broken_ = true;
  // Each side's posted receives are flushed: one error completion tells a
  // side with nothing of its own in flight that the connection is gone.
  for (End& end : ends_) {
    end.regions.clear();
    complete(end, {CompletionKind::arrived, kFlushedStatus, 0, 0});
  }
}

bool LoopbackLink::broken() const {
  std::lock_guard lock(mutex_);
  return broken_;
}

LoopbackStatistics LoopbackLink::statistics(int side) const {
  std::lock_guard lock(mutex_);
  return ends_[side].statistics;
}

}  // namespace qpsock::stream
