// Many shm streams between the same two processes share what is the
// process's, not the connection's: one pidfd on the peer and one doorbell
// each way (link_doorbell.h), watched by the background loop, and the
// sleeping thread's waker. A stream holds no descriptor, and the peer's
// death still ends every stream's calls within a second.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <array>
#include <filesystem>

#include "threaded/shm_process_pair.h"

namespace qpsock::transport::shm {
namespace {

using namespace std::chrono_literals;
using stream::Stream;
using stream::StreamSettings;
using stream::testing::Watchdog;
using testing::ChildProcess;
using testing::connect_shm_stream;
using testing::SocketPair;

constexpr size_t kStreams = 8;
constexpr uint64_t kEcho = 300'000;

size_t open_descriptors() {
  size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
    ++count;
  return count;
}

uint64_t seed_of(size_t stream) { return 100 + stream; }

TEST(ShmSharedPeer, StreamsToOneProcessShareItsDescriptorsAndAllEndAtItsDeath) {
  std::array<SocketPair, kStreams> sockets;
  ChildProcess child([&] {
    Watchdog watchdog(60s, "shm shared peer child");
    std::array<std::unique_ptr<Stream>, kStreams> streams;
    for (size_t index = 0; index < kStreams; ++index) {
      ::close(sockets[index].fds[0]);
      if (connect_shm_stream(sockets[index].fds[1], ShmRole::responder, ::getppid(),
                             StreamSettings{}, streams[index]) < 0)
        return 2;
    }
    // Echo each stream's bytes back, then wait to be killed.
    std::vector<uint8_t> buffer(64 << 10);
    for (size_t index = 0; index < kStreams; ++index) {
      for (uint64_t done = 0; done < kEcho;) {
        const ssize_t got = stream::testing::receive_bytes(
            *streams[index], {buffer.data(), std::min<size_t>(buffer.size(), kEcho - done)}, 0);
        if (got <= 0) return 3;
        if (stream::testing::send_bytes(*streams[index], {buffer.data(), static_cast<size_t>(got)}) != got)
          return 4;
        done += static_cast<uint64_t>(got);
      }
    }
    ::pause();
    return 0;
  });
  ASSERT_GT(child.pid(), 0);
  Watchdog watchdog(60s, "shm shared peer parent");
  std::array<std::unique_ptr<Stream>, kStreams> streams;
  // The first stream brings what the process keeps once: the pidfd, the
  // doorbells, the background loop's set. The later ones add nothing.
  ASSERT_EQ(connect_shm_stream(sockets[0].fds[0], ShmRole::initiator, child.pid(), StreamSettings{},
                               streams[0]),
            0);
  const size_t after_first = open_descriptors();
  for (size_t index = 1; index < kStreams; ++index)
    ASSERT_EQ(connect_shm_stream(sockets[index].fds[0], ShmRole::initiator, child.pid(),
                                 StreamSettings{}, streams[index]),
              0);
  EXPECT_EQ(open_descriptors() - after_first, 0u);

  // Every stream carries its bytes intact, in order.
  for (size_t index = 0; index < kStreams; ++index) {
    EXPECT_EQ(testing::write_pattern(*streams[index], seed_of(index), kEcho, {0, index}), kEcho);
    EXPECT_EQ(testing::read_pattern(*streams[index], seed_of(index), kEcho, {0, index + 50}), kEcho);
  }

  // A reader sleeping on each stream: all end within a second of the death.
  std::array<std::thread, kStreams> readers;
  std::array<std::atomic<int64_t>, kStreams> ended_at{};
  for (size_t index = 0; index < kStreams; ++index)
    readers[index] = std::thread([&, index] {
      std::array<uint8_t, 64> byte;
      EXPECT_LE(stream::testing::receive_bytes(*streams[index], {byte.data(), byte.size()}, 0), 0);
      ended_at[index] = std::chrono::steady_clock::now().time_since_epoch().count();
    });
  std::this_thread::sleep_for(100ms);  // (they sleep by now)
  child.kill_now();
  const auto killed_at = std::chrono::steady_clock::now();
  for (size_t index = 0; index < kStreams; ++index) {
    readers[index].join();
    const auto ended = std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(ended_at[index].load()));
    EXPECT_LT(ended - killed_at, 1s) << "stream " << index;
    EXPECT_TRUE(streams[index]->broken()) << "stream " << index;
  }
  EXPECT_EQ(child.wait(5s), -1);  // killed
  for (auto& stream : streams) stream.reset();
  // The link's pools go with it, once the background loop has told the
  // link of the death.
  EXPECT_TRUE(testing::arena_mappings_become(0));
}

}  // namespace
}  // namespace qpsock::transport::shm
