#include "upgrade/rdma_readiness.h"

#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/log.h"
#include "common/small_file.h"
#include "stream/record.h"
#include "transport/verbs/pin_budget.h"
#include "transport/verbs/verbs_library.h"

namespace qpsock::upgrade {
namespace {

constexpr uint64_t kFirstBounceBuffer = uint64_t{64} << 10;

// rdma_cm's device file and at least one RDMA device. Looked at once per
// process: devices come and go far more rarely than processes.
bool rdma_devices_present() {
  static const bool present = [] {
    if (access("/dev/infiniband/rdma_cm", R_OK | W_OK) != 0) return false;
    DIR* devices = opendir("/sys/class/infiniband");
    if (devices == nullptr) return false;
    bool found = false;
    while (const dirent* entry = readdir(devices)) {
      if (entry->d_name[0] != '.') {
        found = true;
        break;
      }
    }
    closedir(devices);
    return found;
  }();
  return present;
}

std::atomic<bool> memlock_warned{false};

// What this process has pinned (VmPin in /proc/self/status, where
// ib_umem_get counts registrations), in KiB; 0 if it cannot be read.
unsigned long long pinned_kib() {
  char text[4096];
  if (read_small_file("/proc/self/status", text, sizeof(text)) <= 0) return 0;
  const char* line = strstr(text, "\nVmPin:");
  return line != nullptr ? strtoull(line + 7, nullptr, 10) : 0;
}

}  // namespace

uint64_t pinned_bytes_per_connection(uint64_t ring_size) {
  // Our ring and its request box, the staging mirror of the peer's ring, the
  // bounce buffer, and the requests we send.
  return 2 * ring_size + kFirstBounceBuffer + 2 * stream::kRequestBoxSize;
}

const char* reason_rdma_unusable(uint64_t ring_size) {
  if (!rdma_devices_present()) return "no RDMA device on this host";
  // Loaded only now, on a host with devices (logged once when it fails).
  if (!transport::verbs::verbs_library_loaded()) return "the RDMA libraries cannot be loaded";
  const std::optional<uint64_t> limit = transport::verbs::pinning_limit();
  const uint64_t needed = pinned_bytes_per_connection(ring_size);
  if (!limit || *limit >= needed) return nullptr;
  if (!memlock_warned.exchange(true, std::memory_order_relaxed))
    QPSOCK_LOG(warn,
               "RLIMIT_MEMLOCK is %llu KiB, below the %llu KiB an RDMA connection pins: "
               "connections stay on TCP (raise it, e.g. ulimit -l unlimited)",
               static_cast<unsigned long long>(*limit >> 10),
               static_cast<unsigned long long>(needed >> 10));
  return "RLIMIT_MEMLOCK is too low to pin an RDMA connection's buffers";
}

void report_pinning_failure(int error, uint64_t ring_size) {
  if (error != -ENOMEM && error != -EPERM) return;
  const std::optional<uint64_t> limit = transport::verbs::pinning_limit();
  if (!limit || memlock_warned.exchange(true, std::memory_order_relaxed)) return;
  QPSOCK_LOG(warn,
             "RLIMIT_MEMLOCK is %llu KiB and this process pins %llu KiB already; an RDMA "
             "connection needs %llu KiB more: new connections stay on TCP (raise it, e.g. "
             "ulimit -l unlimited)",
             static_cast<unsigned long long>(*limit >> 10), pinned_kib(),
             static_cast<unsigned long long>(pinned_bytes_per_connection(ring_size) >> 10));
}

}  // namespace qpsock::upgrade
