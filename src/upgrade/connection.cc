#include "upgrade/connection.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>

#include <cerrno>

#include "common/log.h"
#include "libc/next_symbols.h"
#include "upgrade/random_token.h"

namespace qpsock::upgrade {

Connection::Connection(config::Role role) : role_(role) { fill_random_token(expected_token_); }

Connection::~Connection() = default;

bool Connection::begin_negotiation() {
  UpgradePhase expected = UpgradePhase::offered;
  return phase_.compare_exchange_strong(expected, UpgradePhase::negotiating,
                                        std::memory_order_acq_rel);
}

void Connection::decline(const char* reason) {
  UpgradePhase current = phase_.load(std::memory_order_acquire);
  while (current == UpgradePhase::offered || current == UpgradePhase::negotiating) {
    if (phase_.compare_exchange_weak(current, UpgradePhase::declined, std::memory_order_acq_rel)) {
      decline_reason_.store(reason, std::memory_order_release);
      report_path();
      return;
    }
  }
}

void Connection::attach_statistics(stats::Handle handle) {
  statistics_.store(handle, std::memory_order_release);
  report_path();
}

void Connection::report_path() {
  const stats::Handle handle = statistics_.load(std::memory_order_acquire);
  if (handle == 0) return;
  switch (phase()) {
    case UpgradePhase::offered:
    case UpgradePhase::negotiating:
      return;  // still pending, as recorded
    case UpgradePhase::established:
      stats::set_path(handle, offloaded_path_, "upgraded to shared memory");
      return;
    case UpgradePhase::declined: {
      const char* reason = decline_reason_.load(std::memory_order_acquire);
      stats::set_path(handle, stats::Path::kernel, reason != nullptr ? reason : "upgrade declined");
      return;
    }
  }
}

namespace {
std::atomic<uint64_t> installed_streams{0};
}  // namespace

uint64_t stream_installations() { return installed_streams.load(std::memory_order_acquire); }

void Connection::install(std::unique_ptr<stream::Stream> stream, const BindingToken& peer_token,
                         int tcp_fd) {
  peer_token_ = peer_token;
  stream::Stream* raw = stream.get();
  stream_ = std::move(stream);
  // After the switch the TCP connection carries nothing but the token and the
  // FIN or RST of a closing or dying peer: the stream learns of those here.
  raw->set_control_channel(tcp_fd, [this, tcp_fd, raw](short revents) {
    if (!receiving_switched()) return stream::ControlVerdict::stop_watching;
    if ((revents & POLLERR) != 0) return stream::ControlVerdict::connection_lost;
    char byte;
    const ssize_t got = next::recv(tcp_fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
    if (got < 0 && errno == EAGAIN) return stream::ControlVerdict::keep_waiting;
    // EOF after the stream's own end: an orderly close. Anything else (EOF
    // first, a reset, stray bytes) means the peer is gone.
    if (got == 0 && (raw->readiness() & POLLRDHUP) != 0) return stream::ControlVerdict::stop_watching;
    return stream::ControlVerdict::connection_lost;
  });
  // SO_RCVLOWAT set before the upgrade; later changes come through setsockopt.
  int low_water = 1;
  socklen_t length = sizeof(low_water);
  if (next::getsockopt(tcp_fd, SOL_SOCKET, SO_RCVLOWAT, &low_water, &length) == 0 && low_water > 1)
    raw->set_receive_low_water(static_cast<size_t>(low_water));
  stream_installed_.store(raw, std::memory_order_release);
  phase_.store(UpgradePhase::established, std::memory_order_release);
  installed_streams.fetch_add(1, std::memory_order_acq_rel);
  report_path();
}

int Connection::readable_bytes(int fd, int& bytes) {
  std::unique_lock lock(receive_mutex_);
  int tcp_bytes = 0;
  if (next::ioctl(fd, FIONREAD, &tcp_bytes) != 0) return -errno;
  if (!receiving_switched()) {
    // Token bytes already in the kernel are not the application's.
    learn_switch_point_locked();
    if (switch_point_ >= 0) {
      const uint64_t left = static_cast<uint64_t>(switch_point_) - tcp_received_;
      if (static_cast<uint64_t>(tcp_bytes) > left) tcp_bytes = static_cast<int>(left);
    }
    bytes = tcp_bytes;
    return 0;
  }
  bytes = static_cast<int>(stream()->readable_bytes());
  return 0;
}

int Connection::unsent_bytes(int fd, int& bytes) {
  if (sending_switched()) {
    bytes = static_cast<int>(stream()->unsent_bytes());
    return 0;
  }
  return next::ioctl(fd, SIOCOUTQ, &bytes) == 0 ? 0 : -errno;
}

int Connection::take_error(int fd, int& error) {
  if (stream::Stream* current = stream(); current != nullptr && switched()) {
    error = current->take_error();
    if (error != 0) {
      // The kernel's socket, now only the control channel, may hold the same
      // event (the peer's reset reaches it too): reported once, as TCP does.
      int kernel_error = 0;
      socklen_t length = sizeof(kernel_error);
      next::getsockopt(fd, SOL_SOCKET, SO_ERROR, &kernel_error, &length);
      return 0;
    }
  }
  socklen_t length = sizeof(error);
  return next::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 ? 0 : -errno;
}

int Connection::shutdown(int fd, int how) {
  stream::Stream* current = stream();
  if (current != nullptr) {
    if ((how == SHUT_WR || how == SHUT_RDWR) && sending_switched()) current->shutdown_write();
    if ((how == SHUT_RD || how == SHUT_RDWR) && receiving_switched()) current->shutdown_read();
  }
  // The kernel's half-close too: before the switch it is the real one, after
  // it the FIN tells the peer's control channel that we ended in order.
  return next::shutdown(fd, how);
}

bool Connection::close_stream() {
  stream::Stream* current = stream();
  if (current == nullptr) return false;
  const stream::CloseResult result = current->close();
  if (result.error != 0) QPSOCK_LOG(debug, "closing an upgraded stream: %d", result.error);
  return result.unread_bytes > 0;
}

}  // namespace qpsock::upgrade
