// Readiness signals (stream/readiness_signal.h): an epoll set's sleeper is
// woken by every change a notifier makes while it sleeps, however a notify
// falls against the sleeper's drain of the eventfd.
#include "stream/readiness_signal.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>

namespace qpsock::stream {
namespace {

// As a stream and an epoll set use it: the notifier changes the state under
// the stream's lock and notifies, again and again; the sleeper arms, looks
// at the state under that lock, sleeps on the eventfd only when nothing is
// new, and drains after every look. Many notifies so land inside a drain,
// and none may leave the later ones unwritten: the sleeper would then sleep
// through changes made while it sleeps.
TEST(ReadinessSignal, NoChangeIsSleptThroughWhateverTheDrainMeets) {
  ReadinessSignal signal;
  ASSERT_EQ(signal.open(), 0);
  std::mutex state_mutex;
  uint64_t changes = 0;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> sleeps{0};
  std::atomic<bool> slept_through{false};

  std::thread sleeper([&] {
    uint64_t last = 0;
    while (!stop.load() && !slept_through.load()) {
      signal.add_sleeper();
      uint64_t now;
      {
        std::lock_guard lock(state_mutex);
        now = changes;
      }
      if (now == last) {
        sleeps.fetch_add(1);
        pollfd readable{signal.fd(), POLLIN, 0};
        // A wakeup comes in microseconds; a second without one is a lost one.
        if (::poll(&readable, 1, 1000) == 0 && !stop.load()) {
          std::lock_guard lock(state_mutex);
          if (changes != last) slept_through.store(true);
        }
      }
      signal.drain();
      signal.remove_sleeper();
      std::lock_guard lock(state_mutex);
      last = changes;
    }
  });

  uint32_t pause = 1;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < end && !slept_through.load()) {
    {
      std::lock_guard lock(state_mutex);
      ++changes;
      signal.notify();
    }
    // Pauses of every length up to a few microseconds, so that notifies
    // fall anywhere in the sleeper's loop.
    pause = pause * 1103515245u + 12345u;
    for (uint32_t spin = (pause >> 16) % 2048; spin > 0; --spin)
      std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  stop.store(true);
  {
    std::lock_guard lock(state_mutex);
    ++changes;
    signal.notify();
  }
  sleeper.join();
  EXPECT_FALSE(slept_through.load());
  EXPECT_GT(sleeps.load(), 0u);
}

}  // namespace
}  // namespace qpsock::stream
