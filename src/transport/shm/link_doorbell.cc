#include "transport/shm/link_doorbell.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/errno_guard.h"
#include "common/own_descriptor.h"
#include "common/random_word.h"
#include "libc/next_symbols.h"

namespace qpsock::transport::shm {

bool non_blocking_eventfd(int fd) {
  const int flags = next::fcntl(fd, F_GETFL);
  if (flags < 0 || (flags & O_NONBLOCK) == 0) return false;
  char path[32];
  char target[32] = {};
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  // Where /proc cannot tell (not mounted, not readable), O_NONBLOCK is all.
  if (::readlink(path, target, sizeof(target) - 1) < 0) return true;
  return strcmp(target, "anon_inode:[eventfd]") == 0;
}

void ring_doorbell(const DoorbellTarget& target, uint32_t slot) {
  mark_woken(*target.bits, slot);
  ring_link_doorbell(target);
}

void ring_link_doorbell(const DoorbellTarget& target) {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t written = next::write(target.doorbell_fd, &one, sizeof(one));
}

int OwnDoorbell::open(BackgroundCallback callback, uint64_t tag) {
  link_id_ = random_word();
  doorbell_.reset(keep_own_descriptor(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)));
  if (!doorbell_.valid()) return -errno;
  if (int error = page_.create(); error < 0) return error;
  return watch_in_background(doorbell_.get(), EPOLLIN | EPOLLET, callback, tag);
}

OwnDoorbell::~OwnDoorbell() {
  // The peer holds the eventfd's file too: closing ours leaves it watched.
  if (doorbell_.valid()) unwatch_in_background(doorbell_.get());
}

int64_t OwnDoorbell::add_channel() {
  std::lock_guard lock(table_mutex_);
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    if (channels_.size() == kLinkChannels) return -ENOSPC;
    slot = static_cast<uint32_t>(channels_.size());
    channels_.emplace_back();
  }
  channels_[slot] = {true, nullptr};
  return slot;
}

void OwnDoorbell::set_listener(uint32_t slot, stream::WakeupListener* listener) {
  std::lock_guard lock(table_mutex_);
  if (slot < channels_.size() && channels_[slot].used) channels_[slot].listener = listener;
}

void OwnDoorbell::remove_channel(uint32_t slot) {
  std::lock_guard lock(table_mutex_);
  if (slot >= channels_.size() || !channels_[slot].used) return;
  channels_[slot] = {};
  free_slots_.push_back(slot);
}

void OwnDoorbell::dispatch() {
  uint64_t count;
  [[maybe_unused]] ssize_t drained = next::read(doorbell_.get(), &count, sizeof(count));
  page_.take_marked([this](uint32_t slot) {
    std::lock_guard lock(table_mutex_);
    if (slot < channels_.size() && channels_[slot].listener != nullptr)
      channels_[slot].listener->transport_signalled();
  });
}

int PeerDoorbell::attach(uint64_t link_id, UniqueFd doorbell, int page_fd) {
  if (!doorbell.valid() || !non_blocking_eventfd(doorbell.get())) return -EPROTO;
  if (int error = map_peer_wake_page(page_fd, page_); error < 0) return error;
  link_id_ = link_id;
  doorbell_ = std::move(doorbell);
  return 0;
}

int PeerDoorbell::sleeper_fd(int pidfd, uint32_t number, stream::FunctionRef<bool()> same_image) {
  std::lock_guard lock(sleeper_fds_mutex_);
  for (const SleeperFd& known : sleeper_fds_)
    if (known.number == number) return known.fd.get();
  if (sleeper_fds_.size() == kMostSleeperFds || !same_image()) return -1;
  ErrnoGuard errno_guard;
  UniqueFd taken(keep_own_descriptor(
      static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, static_cast<int>(number), 0))));
  // Out of descriptors (ours or the system's) is for now, not for good.
  if (!taken.valid() && (errno == EMFILE || errno == ENFILE)) return -1;
  if (taken.valid() && (!non_blocking_eventfd(taken.get()) || !same_image())) taken.reset();
  sleeper_fds_.push_back({number, std::move(taken)});
  return sleeper_fds_.back().fd.get();
}

}  // namespace qpsock::transport::shm
