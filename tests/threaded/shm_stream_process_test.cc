// The stream engine over the shm transport between two real processes (a
// forked child): a GiB each way at once with random write and read sizes,
// 16 MiB single writes, a peer killed mid-transfer, and no arena left behind.
// These run under ThreadSanitizer too (each process has a writer and a
// reader thread), with a quarter of the bytes.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>

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
using testing::TransferPlan;

constexpr uint64_t kParentSeed = 11;
constexpr uint64_t kChildSeed = 23;

StreamSettings process_settings() {
  StreamSettings settings;  // the defaults: 1 MiB ring, 64 KiB chunks and threshold
  return settings;
}

// The child's half: connect, move `plan` both ways, meet the parent, and
// close after it did. (The second to close finds the link already
// disconnected by the first: its close may report ECONNRESET.)
int child_transfer(int socket, const TransferPlan& plan) {
  Watchdog watchdog(240s, "shm child");
  std::unique_ptr<Stream> stream;
  if (connect_shm_stream(socket, ShmRole::responder, ::getppid(), process_settings(), stream) < 0)
    return 2;
  if (!testing::transfer_both_ways(*stream, kChildSeed, kParentSeed, plan)) return 3;
  if (!testing::rendezvous(socket) || !testing::rendezvous(socket)) return 4;
  stream->close();
  return 0;
}

// The parent's Stream to the child at the other end of `sockets`.
void connect_parent(const SocketPair& sockets, const ChildProcess& child,
                    std::unique_ptr<Stream>& stream) {
  ASSERT_EQ(connect_shm_stream(sockets.fds[0], ShmRole::initiator, child.pid(), process_settings(),
                               stream),
            0);
}

void run_both_ways(const TransferPlan& plan) {
  SocketPair sockets;
  ChildProcess child([&] {
    ::close(sockets.fds[0]);
    return child_transfer(sockets.fds[1], plan);
  });
  ASSERT_GT(child.pid(), 0);
  Watchdog watchdog(240s, "shm parent");
  {
    std::unique_ptr<Stream> stream;
    ASSERT_NO_FATAL_FAILURE(connect_parent(sockets, child, stream));
    EXPECT_TRUE(testing::transfer_both_ways(*stream, kParentSeed, kChildSeed, plan));
    EXPECT_TRUE(testing::rendezvous(sockets.fds[0]));
    EXPECT_EQ(stream->close().error, 0);
    EXPECT_TRUE(testing::rendezvous(sockets.fds[0]));
  }
  EXPECT_EQ(child.wait(30s), 0);
  // The link goes once the loop hears of the child's exit.
  EXPECT_TRUE(testing::arena_mappings_become(0));
}

TEST(ShmStreamProcessTest, AGibibyteEachWayAtOnceWithRandomSizes) {
  run_both_ways({.bytes = testing::process_volume(uint64_t{1} << 30)});
}

TEST(ShmStreamProcessTest, SixteenMebibyteSingleWritesEachWay) {
  constexpr size_t kWrite = 16 << 20;
  run_both_ways(
      {.bytes = testing::process_volume(8 * kWrite), .write_size = kWrite, .read_size = kWrite});
}

TEST(ShmStreamProcessTest, AKilledPeerEndsTheSurvivorsCallsWithinASecond) {
  SocketPair sockets;
  ChildProcess child([&] {
    ::close(sockets.fds[0]);
    std::unique_ptr<Stream> stream;
    if (connect_shm_stream(sockets.fds[1], ShmRole::responder, ::getppid(), process_settings(),
                           stream) < 0)
      return 2;
    // Writes and reads until killed.
    testing::transfer_both_ways(*stream, kChildSeed, kParentSeed, {.bytes = uint64_t{1} << 50});
    return 0;
  });
  ASSERT_GT(child.pid(), 0);
  Watchdog watchdog(60s, "shm survivor");
  {
    std::unique_ptr<Stream> stream;
    ASSERT_NO_FATAL_FAILURE(connect_parent(sockets, child, stream));
    std::atomic<uint64_t> written{0};
    std::atomic<bool> writer_done{false};
    std::atomic<int64_t> writer_ended_at{0};
    std::thread writer([&] {
      written = testing::write_pattern(*stream, kParentSeed, uint64_t{1} << 50, {0, 3});
      writer_ended_at = std::chrono::steady_clock::now().time_since_epoch().count();
      writer_done = true;
    });
    // Read a while, then kill the peer in the middle of everything.
    const uint64_t before_kill = testing::read_pattern(*stream, kChildSeed, 64 << 20, {0, 4});
    EXPECT_EQ(before_kill, uint64_t{64} << 20);
    child.kill_now();
    const auto killed_at = std::chrono::steady_clock::now();
    // Our reads deliver what had arrived, then end (an error or EOF).
    const uint64_t after_kill =
        testing::read_pattern(*stream, kChildSeed, uint64_t{1} << 50, {0, 5});
    const auto reader_ended_at = std::chrono::steady_clock::now();
    EXPECT_LT(after_kill, uint64_t{1} << 50);
    EXPECT_LT(reader_ended_at - killed_at, 1s);
    writer.join();
    EXPECT_TRUE(writer_done);
    const auto writer_end = std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(writer_ended_at.load()));
    EXPECT_LT(writer_end - killed_at, 1s);
    EXPECT_TRUE(stream->broken());
  }
  EXPECT_EQ(child.wait(5s), -1);  // killed
  EXPECT_TRUE(testing::arena_mappings_become(0));
}

}  // namespace
}  // namespace qpsock::transport::shm
