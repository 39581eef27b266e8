// Quick figures for Stream over shm between two processes (not run by
// default; never asserted): 64 B ping-pong half round trip, and the
// bandwidth of 1 MiB writes; and the transport's own 64 B ping-pong (busy
// polling, no engine), the floor under the first. Run with
//   qpsock_threaded_tests --gtest_also_run_disabled_tests --gtest_filter='ShmStreamBenchmark*'
// and compare with bench/socket_pingpong local and bench/socket_stream local.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <vector>

#include "threaded/shm_process_pair.h"

namespace qpsock::transport::shm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using stream::Stream;
using stream::testing::receive_bytes;
using stream::testing::send_bytes;
using stream::testing::Watchdog;
using testing::ChildProcess;
using testing::connect_shm_stream;
using testing::SocketPair;

constexpr size_t kMessage = 64;
constexpr int kWarmup = 10'000;
constexpr int kRoundTrips = 100'000;
constexpr size_t kWrite = 1 << 20;
constexpr uint64_t kStreamBytes = uint64_t{8} << 30;

// Runs `child_body` on a Stream in a child and `parent_body` on ours.
template <typename ChildBody, typename ParentBody>
void with_stream_pair(ChildBody child_body, ParentBody parent_body) {
  SocketPair sockets;
  ChildProcess child([&] {
    ::close(sockets.fds[0]);
    Watchdog watchdog(120s, "benchmark child");
    std::unique_ptr<Stream> stream;
    if (connect_shm_stream(sockets.fds[1], ShmRole::responder, ::getppid(), {}, stream) < 0)
      return 2;
    child_body(*stream);
    return 0;
  });
  Watchdog watchdog(120s, "benchmark parent");
  std::unique_ptr<Stream> stream;
  ASSERT_EQ(connect_shm_stream(sockets.fds[0], ShmRole::initiator, child.pid(), {}, stream), 0);
  parent_body(*stream);
  stream->shutdown_write();
  EXPECT_EQ(child.wait(30s), 0);
}

// Times each round trip of `round_trip` after a warm-up; prints the halves.
template <typename RoundTrip>
void time_round_trips(const char* what, RoundTrip round_trip) {
  std::vector<double> half_trips;
  half_trips.reserve(kRoundTrips);
  for (int trip = 0; trip < kWarmup + kRoundTrips; ++trip) {
    const auto start = Clock::now();
    ASSERT_EQ(round_trip(), 0);
    if (trip >= kWarmup)
      half_trips.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                           2);
  }
  std::sort(half_trips.begin(), half_trips.end());
  double sum = 0;
  for (double value : half_trips) sum += value;
  std::fprintf(stderr,
               "%s ping-pong %zu B: half round trip median %.2f us, p99 %.2f us, mean %.2f us, "
               "min %.2f us (%d round trips)\n",
               what, kMessage, half_trips[half_trips.size() / 2],
               half_trips[half_trips.size() * 99 / 100],
               sum / static_cast<double>(half_trips.size()), half_trips.front(), kRoundTrips);
}

TEST(ShmStreamBenchmark, DISABLED_PingPong64Bytes) {
  with_stream_pair(
      [](Stream& stream) {
        std::vector<uint8_t> message(kMessage);
        while (receive_bytes(stream, message, MSG_WAITALL) == static_cast<ssize_t>(kMessage))
          send_bytes(stream, message);
      },
      [](Stream& stream) {
        std::vector<uint8_t> message(kMessage, 1);
        time_round_trips("shm stream", [&] {
          if (send_bytes(stream, message) != static_cast<ssize_t>(kMessage)) return -1;
          return receive_bytes(stream, message, MSG_WAITALL) == static_cast<ssize_t>(kMessage) ? 0
                                                                                               : -2;
        });
      });
}

TEST(ShmStreamBenchmark, DISABLED_Bandwidth1MiBWrites) {
  with_stream_pair(
      [](Stream& stream) {
        std::vector<uint8_t> buffer(kWrite);
        uint64_t received = 0;
        for (ssize_t got; (got = receive_bytes(stream, buffer)) > 0;)
          received += static_cast<uint64_t>(got);
        const uint8_t done = received == kStreamBytes ? 1 : 0;
        send_bytes(stream, {&done, 1});
        stream.close();
      },
      [](Stream& stream) {
        std::vector<uint8_t> buffer(kWrite, 7);
        const auto start = Clock::now();
        for (uint64_t sent = 0; sent < kStreamBytes; sent += kWrite)
          ASSERT_EQ(send_bytes(stream, buffer), static_cast<ssize_t>(kWrite));
        stream.shutdown_write();
        uint8_t done = 0;
        ASSERT_EQ(receive_bytes(stream, {&done, 1}), 1);
        EXPECT_EQ(done, 1);
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        std::fprintf(stderr,
                     "shm stream 1 MiB writes: %.2f GB/s (%.1f Gbit/s), %llu MiB in %.2f s\n",
                     static_cast<double>(kStreamBytes) / seconds / 1e9,
                     static_cast<double>(kStreamBytes) * 8 / seconds / 1e9,
                     static_cast<unsigned long long>(kStreamBytes >> 20), seconds);
      });
}

// The transport alone: a 64 B write with an immediate, answered in kind,
// both ends busy-polling.
struct RawEnd {
  std::unique_ptr<ShmTransport> transport;
  stream::MappedMemory ring;
  std::unique_ptr<stream::MemoryRegistration> registration;
  stream::RemoteRegion peer_ring{};
};

int connect_raw_end(int socket, ShmRole role, pid_t peer, RawEnd& end) {
  ShmOptions options;
  if (int error = ShmTransport::establish(socket, role, peer, options, end.transport); error < 0)
    return error;
  if (int error = end.transport->map_receive_ring(options.ring_size, end.ring); error < 0)
    return error;
  if (int error = end.transport->register_memory(
          end.ring.data(), end.ring.size(), stream::MemoryAccess::remote_write, end.registration);
      error < 0)
    return error;
  const stream::RemoteRegion ours{reinterpret_cast<uint64_t>(end.ring.data()),
                                  end.registration->remote_key()};
  return testing::send_all(socket, &ours, sizeof(ours)) &&
                 testing::receive_all(socket, &end.peer_ring, sizeof(end.peer_ring))
             ? 0
             : -EPROTO;
}

// Sends one message, then spins until the peer's arrives (or the other way
// round); 0, or the failed post's or completion's status.
int bounce(RawEnd& end, bool send_first) {
  std::array<uint8_t, kMessage> message{};
  const stream::LocalSlice slice{reinterpret_cast<std::byte*>(message.data()), message.size(),
                                 nullptr};
  auto send = [&] { return end.transport->post_write({&slice, 1}, end.peer_ring, 1u, 0); };
  if (send_first)
    if (int error = send(); error < 0) return error;
  std::array<stream::Completion, 8> batch;
  for (bool arrived = false; !arrived;) {
    const int count = end.transport->poll(batch);
    if (count < 0) return count;
    for (int index = 0; index < count; ++index) {
      if (batch[index].status != 0) return batch[index].status;
      arrived = arrived || batch[index].kind == stream::CompletionKind::arrived;
    }
  }
  return send_first ? 0 : send();
}

TEST(ShmStreamBenchmark, DISABLED_TransportPingPong64Bytes) {
  SocketPair sockets;
  ChildProcess child([&] {
    ::close(sockets.fds[0]);
    Watchdog watchdog(120s, "benchmark child");
    RawEnd end;
    if (connect_raw_end(sockets.fds[1], ShmRole::responder, ::getppid(), end) < 0) return 2;
    for (int trip = 0; trip < kWarmup + kRoundTrips; ++trip)
      if (int error = bounce(end, false); error < 0) return 100 - error;
    return 0;
  });
  Watchdog watchdog(120s, "benchmark parent");
  RawEnd end;
  ASSERT_EQ(connect_raw_end(sockets.fds[0], ShmRole::initiator, child.pid(), end), 0);
  time_round_trips("shm transport (busy polling)", [&] { return bounce(end, true); });
  EXPECT_EQ(child.wait(30s), 0);
}

}  // namespace
}  // namespace qpsock::transport::shm
