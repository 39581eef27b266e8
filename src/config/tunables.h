// The engine's tunables, with their defaults and the ranges the config
// accepts (qpsock.conf(5) documents the same numbers).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace qpsock::config {

// The transport two qpsock processes on the same host use.
enum class SameHost : uint8_t { shm, rdma, kernel };

const char* same_host_name(SameHost same_host);

namespace limits {
inline constexpr uint32_t kLargestInlineSize = 1024;
inline constexpr uint64_t kSmallestRendezvousThreshold = uint64_t{1} << 10;
inline constexpr uint64_t kLargestRendezvousThreshold = uint64_t{64} << 20;
inline constexpr uint64_t kSmallestRingSize = uint64_t{64} << 10;
inline constexpr uint64_t kLargestRingSize = uint64_t{256} << 20;
inline constexpr uint64_t kSmallestEagerChunk = uint64_t{1} << 10;
// The real ceiling is half of ring_size, checked once every source is applied.
inline constexpr uint64_t kLargestEagerChunk = kLargestRingSize / 2;
inline constexpr std::chrono::microseconds kLargestSpinTime = std::chrono::seconds{1};
inline constexpr std::chrono::microseconds kLongestRendezvousPatience = std::chrono::seconds{10};
inline constexpr std::chrono::microseconds kShortestUpgradeTimeout = std::chrono::milliseconds{10};
inline constexpr std::chrono::microseconds kLongestUpgradeTimeout = std::chrono::seconds{60};
inline constexpr std::chrono::microseconds kLongestRdmaUpgradeDelay = std::chrono::seconds{10};
inline constexpr std::chrono::microseconds kLongestShmUpgradeDelay = std::chrono::seconds{10};
inline constexpr std::chrono::microseconds kLongestLinkIdleTime = std::chrono::seconds{3600};
inline constexpr uint64_t kSmallestShmUpgradeBytes = uint64_t{4} << 10;
inline constexpr uint64_t kLargestShmUpgradeBytes = uint64_t{1} << 30;
}  // namespace limits

struct Tunables {
  // Bytes a send may carry inline in the work request; empty: ask the device
  // (max_inline_data of the queue pair).
  std::optional<uint32_t> inline_size;
  // Writes of at least this many bytes go by zero-copy rendezvous.
  uint64_t rendezvous_threshold = uint64_t{64} << 10;
  // How long a rendezvous waits for the peer to begin taking it before the
  // writer copies the bytes instead (the peer is not reading).
  std::chrono::microseconds rendezvous_patience = std::chrono::milliseconds{10};
  // Per-direction eager receive ring; a power of two.
  uint64_t ring_size = uint64_t{1} << 20;
  // Largest eager message; at most ring_size / 2.
  uint64_t eager_chunk = uint64_t{64} << 10;
  // How long a blocking wait busy-polls before it sleeps, at least.
  std::chrono::microseconds spin_time{20};
  // At most how long a blocking read busy-polls when the recent reads were
  // answered within this long (stream/spin_budget.h); at or below spin_time:
  // always spin_time.
  std::chrono::microseconds spin_limit = std::chrono::milliseconds{1};
  // How long the side-channel negotiation may take before the connection stays on TCP.
  std::chrono::microseconds upgrade_timeout = std::chrono::milliseconds{2000};
  // How long after its first I/O a server begins a connection's RDMA
  // upgrade: a connection closed before then never costs an rdma_cm connect
  // (a plain client's reject, or a queue pair set up to be torn down).
  std::chrono::microseconds rdma_upgrade_delay = std::chrono::milliseconds{200};
  // The same on one host: a short connection (an HTTP request, a forked
  // database backend's transaction) never pays for a side channel, a shared
  // ring and its wakeups that it could not repay. 0: the server meets its
  // client at its first I/O, in the application's thread.
  std::chrono::microseconds shm_upgrade_delay = std::chrono::milliseconds{50};
  // Within shm_upgrade_delay, a connection that has moved this many bytes
  // over TCP (each end counts what it sent and received) repays its upgrade
  // already: it begins now, so that a bulk transfer is not left on TCP.
  uint64_t shm_upgrade_bytes = uint64_t{1} << 20;
  // How long a link between two processes on one host (its pools and
  // doorbells) outlives its last connection: connections in sequence then
  // upgrade over it, without a side channel each.
  std::chrono::microseconds link_idle_time = std::chrono::seconds{10};
  SameHost same_host = SameHost::shm;

  bool operator==(const Tunables&) const = default;
};

}  // namespace qpsock::config
