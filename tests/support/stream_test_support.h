// Helpers for the stream engine's tests (header-only: never part of the
// library): a deterministic byte pattern to verify every byte, a watchdog
// that fails a hung test, and iovec helpers.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "stream/loopback_stream_pair.h"

namespace qpsock::stream::testing {

#if defined(__SANITIZE_THREAD__)
#define QPSOCK_TESTING_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define QPSOCK_TESTING_UNDER_TSAN 1
#endif
#endif

// Transfer sizes for the volume tests. ThreadSanitizer slows the copy loops
// some 20x, and CI has two cores: under it the tests move an eighth of the
// bytes, which still wraps every ring thousands of times.
inline constexpr uint64_t volume(uint64_t bytes) {
#ifdef QPSOCK_TESTING_UNDER_TSAN
  return bytes / 8;
#else
  return bytes;
#endif
}

inline uint64_t mix(uint64_t value) {
  value += 0x9e3779b97f4a7c15ull;
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ull;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebull;
  return value ^ (value >> 31);
}

// The byte at stream offset `offset` of the stream seeded `seed`.
inline uint8_t pattern_byte(uint64_t seed, uint64_t offset) {
  return static_cast<uint8_t>(mix(seed ^ (offset >> 3)) >> (8 * (offset & 7)));
}

// One mix() per 8 bytes: fast enough for hundreds of MiB under sanitizers.
inline void fill_pattern(uint64_t seed, uint64_t offset, std::span<uint8_t> bytes) {
  size_t index = 0;
  while (index < bytes.size()) {
    const uint64_t at = offset + index;
    const uint64_t word = mix(seed ^ (at >> 3));
    for (uint64_t lane = at & 7; lane < 8 && index < bytes.size(); ++lane, ++index)
      bytes[index] = static_cast<uint8_t>(word >> (8 * lane));
  }
}

// Index of the first wrong byte, or -1.
inline int64_t first_mismatch(uint64_t seed, uint64_t offset, std::span<const uint8_t> bytes) {
  size_t index = 0;
  while (index < bytes.size()) {
    const uint64_t at = offset + index;
    const uint64_t word = mix(seed ^ (at >> 3));
    for (uint64_t lane = at & 7; lane < 8 && index < bytes.size(); ++lane, ++index)
      if (bytes[index] != static_cast<uint8_t>(word >> (8 * lane))) return static_cast<int64_t>(index);
  }
  return -1;
}

inline iovec as_iovec(std::span<const uint8_t> bytes) {
  return {const_cast<uint8_t*>(bytes.data()), bytes.size()};
}

inline ssize_t send_bytes(Stream& stream, std::span<const uint8_t> bytes, int flags = 0,
                          bool blocking = true) {
  const iovec vector = as_iovec(bytes);
  return stream.send({&vector, 1}, flags, blocking);
}

inline ssize_t receive_bytes(Stream& stream, std::span<uint8_t> bytes, int flags = 0,
                             bool blocking = true) {
  const iovec vector = as_iovec(bytes);
  return stream.receive({&vector, 1}, flags, blocking);
}

// Writes non-blocking from `data` at `offset` until EAGAIN: the new offset.
inline size_t write_until_full(Stream& stream, std::span<const uint8_t> data, size_t offset) {
  for (;;) {
    const ssize_t sent = send_bytes(stream, data.subspan(offset), 0, false);
    if (sent == -EAGAIN) return offset;
    EXPECT_GT(sent, 0);
    if (sent <= 0) return offset;
    offset += static_cast<size_t>(sent);
  }
}

// Settings small enough that tests wrap rings and run out of credit quickly.
inline constexpr RendezvousMethod kBothMethods[] = {RendezvousMethod::read, RendezvousMethod::write};
inline const char* method_name(RendezvousMethod method) {
  return method == RendezvousMethod::read ? "read" : "write";
}

inline StreamSettings small_settings(RendezvousMethod method = RendezvousMethod::read) {
  StreamSettings settings;
  settings.rendezvous_method = method;
  settings.ring_size = 64 << 10;
  settings.eager_chunk = 8 << 10;
  settings.rendezvous_threshold = 32 << 10;
  settings.spin_time = std::chrono::microseconds{5};
  settings.direct_pull_minimum = 4 << 10;
  settings.bounce_size = 16 << 10;
  // A reader in a test may be slow to come (sanitizers, a loaded machine):
  // tests of the patience set their own.
  settings.rendezvous_patience = std::chrono::seconds{30};
  return settings;
}

// Aborts the process (with a message) if not disarmed within `limit`: a hung
// engine must fail the test run, not stall it.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit, const char* what = "test")
      : thread_([this, limit, what] {
          std::unique_lock lock(mutex_);
          if (!changed_.wait_for(lock, limit, [this] { return disarmed_; })) {
            std::fprintf(stderr, "watchdog: %s still running after %lld s\n", what,
                         static_cast<long long>(limit.count()));
            std::abort();
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      disarmed_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool disarmed_ = false;
  std::thread thread_;
};

}  // namespace qpsock::stream::testing
