#include "upgrade/io_uring_detector.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string_view>

#include "common/log.h"
#include "common/own_descriptor.h"
#include "libc/next_symbols.h"
#include "upgrade/connection.h"

namespace qpsock::upgrade {
namespace {

constexpr std::string_view kRingMapping = "[io_uring]";
constexpr auto kRecheckInterval = std::chrono::milliseconds(100);

std::atomic<bool> io_uring_seen{false};
std::atomic<int64_t> last_check_ns{0};  // 0: never checked

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Streams the file through a small buffer (no allocation: this runs inside
// the application's calls), keeping a needle-sized overlap between reads.
bool maps_show_io_uring() {
  const int fd = next::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buffer[8192];
  size_t kept = 0;
  bool found = false;
  for (;;) {
    const ssize_t got = next::read(fd, buffer + kept, sizeof(buffer) - kept);
    if (got <= 0) break;
    const size_t filled = kept + static_cast<size_t>(got);
    if (memmem(buffer, filled, kRingMapping.data(), kRingMapping.size()) != nullptr) {
      found = true;
      break;
    }
    kept = std::min(filled, kRingMapping.size() - 1);
    memmove(buffer, buffer + filled - kept, kept);
  }
  close_descriptor(fd);
  return found;
}

}  // namespace

bool process_uses_io_uring() {
  if (io_uring_seen.load(std::memory_order_relaxed)) return true;
  const int64_t now = now_ns();
  int64_t last = last_check_ns.load(std::memory_order_relaxed);
  if (last != 0 && now - last < std::chrono::nanoseconds(kRecheckInterval).count()) return false;
  if (!last_check_ns.compare_exchange_strong(last, now, std::memory_order_relaxed)) return false;
  if (maps_show_io_uring()) io_uring_seen.store(true, std::memory_order_relaxed);
  return io_uring_seen.load(std::memory_order_relaxed);
}

bool declined_for_io_uring(int fd, Connection& connection) {
  if (!process_uses_io_uring()) return false;
  QPSOCK_LOG(info, "fd %d: this process uses io_uring, which qpsock cannot see; stays on TCP", fd);
  connection.decline("the process uses io_uring");
  return true;
}

}  // namespace qpsock::upgrade
