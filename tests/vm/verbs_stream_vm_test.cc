// The stream engine over the verbs transport on real verbs: two processes
// (forked children), one listening on rxe0 (10.77.0.1), one connecting from
// rxe1 (10.77.0.2), so every byte crosses Soft-RoCE and the veth pair. Data
// moves both ways at once and is checked byte by byte: 1-byte writes, 16 MiB
// writes (the rendezvous path: RDMA WRITE into the reader's buffer), random
// sizes, over IPv4 and IPv6; buffers freed and allocated anew between writes;
// a peer killed mid-transfer ends the survivor's calls within seconds; the
// devices' packet counters grow in line with the payload; a connect nobody
// listens for, or one without our hello, fails within seconds; a remote key
// reaches nothing through another connection, nor after deregistration.
//
// Run in the Soft-RoCE VM (tests/vm/run-vm-suite); elsewhere every test skips.
// The VM is emulated and slow: volumes are tens of MiB, and the printed
// figures compare only with others of the same run.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "vm/verbs_vm_support.h"

namespace qpsock::transport::verbs {
namespace {

using namespace std::chrono_literals;
using stream::Stream;
using stream::testing::TransferPlan;
using testing::ChildReport;
using testing::Endpoints;
using testing::ProcessPair;
using testing::Side;

constexpr uint64_t kServerSeed = 11;
constexpr uint64_t kClientSeed = 23;
constexpr auto kChildLimit = 240s;
constexpr uint64_t kMebibyte = uint64_t{1} << 20;

uint64_t our_seed(Side side) { return side == Side::server ? kServerSeed : kClientSeed; }
uint64_t peer_seed(Side side) { return side == Side::server ? kClientSeed : kServerSeed; }

// The server closes first, the client once the server is done, so that the
// server's close is a clean one: it must flush and report no error. (The
// client's stream may already be broken by the server's disconnect.)
int close_in_turn(Stream& stream, Side side, int sync_socket, ChildReport& report) {
  if (!stream::testing::rendezvous(sync_socket)) return testing::fail(report, 20, "no rendezvous");
  if (side == Side::server) {
    if (stream.broken()) return testing::fail(report, 21, "the stream broke before close");
    if (int error = stream.close().error; error != 0)
      return testing::fail(report, 22, "close: %s", strerror(-error));
    if (!stream::testing::rendezvous(sync_socket))
      return testing::fail(report, 23, "no rendezvous after close");
  } else {
    if (!stream::testing::rendezvous(sync_socket))
      return testing::fail(report, 23, "no rendezvous after close");
    stream.close();
  }
  return 0;
}

testing::Body transfer_body(const TransferPlan& plan) {
  return [plan](Stream& stream, Side side, int sync_socket, int, ChildReport& report) {
    const int64_t started = testing::monotonic_now();
    if (!stream::testing::transfer_both_ways(stream, our_seed(side), peer_seed(side), plan))
      return testing::fail(report, 10, "the transfer lost or corrupted bytes");
    report.elapsed_ns = testing::monotonic_now() - started;
    report.bytes_sent = plan.bytes;
    report.bytes_received = plan.bytes;
    report.rendezvous_bytes_received = stream.rendezvous_counts().bytes_received;
    return close_in_turn(stream, side, sync_socket, report);
  };
}

class VerbsStreamVmTest : public ::testing::Test {
 protected:
  // The endpoints of the harness for `family`, or the test skips.
  std::optional<Endpoints> endpoints(int family) {
    std::string missing;
    auto found = family == AF_INET
                     ? testing::harness_endpoints("IPv4", "10.77.0.1", "10.77.0.2", missing)
                     : testing::harness_endpoints("IPv6", "fd77::1", "fd77::2", missing);
    if (!found) reason_ = missing;
    return found;
  }
  std::string reason_;
};

#define ENDPOINTS_OR_SKIP(variable, family) \
  const auto variable = endpoints(family);  \
  if (!variable) GTEST_SKIP() << reason_;

// Both children ran to a clean exit and reported success.
void expect_both_passed(ProcessPair& pair, ChildReport& server, ChildReport& client) {
  for (Side side : {Side::server, Side::client}) {
    const std::optional<ChildReport> report = pair.report(side, kChildLimit);
    ASSERT_TRUE(report) << testing::side_name(side) << " sent no report";
    EXPECT_EQ(report->status, 0) << testing::side_name(side) << ": " << report->failure;
    EXPECT_EQ(pair.child(side).wait(30s), 0) << testing::side_name(side);
    (side == Side::server ? server : client) = *report;
  }
}

double megabytes_per_second(uint64_t bytes, int64_t nanoseconds) {
  return nanoseconds > 0 ? static_cast<double>(bytes) * 1e3 / static_cast<double>(nanoseconds)
                         : 0.0;
}

// The counters of the two devices grew in line with the payload: each sent
// at least its payload in packets of the path MTU (write or read-response
// packets), and not grossly more (acknowledgements, notifications and
// requests are a small share of bulk traffic).
void expect_counters_follow_payload(const Endpoints& endpoints,
                                    const testing::PortCounters& server_before,
                                    const testing::PortCounters& client_before,
                                    const ChildReport& server, const ChildReport& client) {
  const testing::PortCounters server_after = testing::read_counters(endpoints.server_device);
  const testing::PortCounters client_after = testing::read_counters(endpoints.client_device);
  const uint64_t mtu = server.path_mtu;
  ASSERT_GT(mtu, 0u);
  const uint64_t server_sent = server_after.sent_packets - server_before.sent_packets;
  const uint64_t server_received = server_after.received_packets - server_before.received_packets;
  const uint64_t client_sent = client_after.sent_packets - client_before.sent_packets;
  const uint64_t client_received = client_after.received_packets - client_before.received_packets;
  std::printf(
      "[ counters ] %s: %s sent %llu received %llu packets (%llu retries), %s sent %llu "
      "received %llu (%llu retries); payload %llu B each way, path MTU %llu: at least "
      "%llu packets each way\n",
      endpoints.label, endpoints.server_device.c_str(),
      static_cast<unsigned long long>(server_sent),
      static_cast<unsigned long long>(server_received),
      static_cast<unsigned long long>(server_after.retries - server_before.retries),
      endpoints.client_device.c_str(), static_cast<unsigned long long>(client_sent),
      static_cast<unsigned long long>(client_received),
      static_cast<unsigned long long>(client_after.retries - client_before.retries),
      static_cast<unsigned long long>(server.bytes_sent), static_cast<unsigned long long>(mtu),
      static_cast<unsigned long long>(server.bytes_sent / mtu));
  const uint64_t server_packets = server.bytes_sent / mtu;
  const uint64_t client_packets = client.bytes_sent / mtu;
  if (endpoints.server_device == endpoints.client_device) {
    // One device carries both ends (rxe's own loopback): it sends and receives everything.
    EXPECT_GE(server_sent, server_packets + client_packets);
    EXPECT_LE(server_sent, 2 * (server_packets + client_packets) + 20000);
    return;
  }
  EXPECT_GE(server_sent, server_packets);
  EXPECT_GE(client_sent, client_packets);
  EXPECT_GE(server_received, client_packets);
  EXPECT_GE(client_received, server_packets);
  EXPECT_LE(server_sent, 2 * server_packets + client_packets / 4 + 20000);
  EXPECT_LE(client_sent, 2 * client_packets + server_packets / 4 + 20000);
}

// Whether some writes must have gone by rendezvous (zero-copy) at each end.
enum class ZeroCopy : uint8_t { may, must };

void run_transfer(const Endpoints& endpoints, const TransferPlan& plan, const char* what,
                  bool check_counters, ZeroCopy zero_copy = ZeroCopy::may) {
  const testing::PortCounters server_before = testing::read_counters(endpoints.server_device);
  const testing::PortCounters client_before = testing::read_counters(endpoints.client_device);
  ProcessPair pair(endpoints, transfer_body(plan), transfer_body(plan), kChildLimit);
  stream::testing::Watchdog watchdog(kChildLimit + 30s, "verbs transfer test");
  ChildReport server, client;
  ASSERT_NO_FATAL_FAILURE(expect_both_passed(pair, server, client));
  if (server.status != 0 || client.status != 0) return;
  const int64_t elapsed = std::max(server.elapsed_ns, client.elapsed_ns);
  std::printf(
      "[ figures  ] %s %s (%s -> %s): %llu B each way at once in %.3f s: %.1f MB/s each "
      "way; path MTU %u, inline %u B, reads %u, send queue %u, receives %u, rendezvous %s; "
      "zero-copy %llu and %llu B received\n",
      endpoints.label, what, client.device, server.device,
      static_cast<unsigned long long>(plan.bytes), static_cast<double>(elapsed) / 1e9,
      megabytes_per_second(plan.bytes, elapsed), server.path_mtu, server.max_inline,
      server.max_reads, server.send_queue_depth, server.notification_capacity,
      server.rendezvous_by_write ? "by RDMA WRITE" : "not by write",
      static_cast<unsigned long long>(server.rendezvous_bytes_received),
      static_cast<unsigned long long>(client.rendezvous_bytes_received));
  EXPECT_TRUE(server.rendezvous_by_write && client.rendezvous_by_write)
      << "streams over Soft-RoCE must move rendezvous by RDMA WRITE, never pull them by reads";
  if (zero_copy == ZeroCopy::must) {
    EXPECT_GT(server.rendezvous_bytes_received, 0u) << "no write went zero-copy";
    EXPECT_GT(client.rendezvous_bytes_received, 0u) << "no write went zero-copy";
  }
  if (check_counters)
    expect_counters_follow_payload(endpoints, server_before, client_before, server, client);
}

TEST_F(VerbsStreamVmTest, OneByteWritesEachWayIpv4) {
  ENDPOINTS_OR_SKIP(found, AF_INET);
  // Every write is a record of its own, posted inline.
  run_transfer(*found, {.bytes = 3000, .write_size = 1, .read_size = 0}, "1-byte writes", false);
}

TEST_F(VerbsStreamVmTest, SixteenMebibyteWritesEachWayIpv4) {
  ENDPOINTS_OR_SKIP(found, AF_INET);
  // Each write goes by rendezvous: the writer writes it with RDMA WRITEs
  // straight into the reader's buffer, as the reader asks.
  constexpr size_t kWrite = 16 * kMebibyte;
  run_transfer(*found, {.bytes = 2 * kWrite, .write_size = kWrite, .read_size = kWrite},
               "16 MiB writes", true, ZeroCopy::must);
}

TEST_F(VerbsStreamVmTest, RandomSizesEachWayIpv4) {
  ENDPOINTS_OR_SKIP(found, AF_INET);
  // 1 B to 4 MiB, log-uniform: eager, inline and rendezvous mixed.
  run_transfer(*found, {.bytes = 24 * kMebibyte}, "random sizes", true, ZeroCopy::must);
}

// Registration: every rendezvous buffer is registered for that one write and
// read, never cached, so memory freed and mapped again at the same address
// (glibc unmaps blocks of 128 KiB and more on free) can never be reached
// through a stale registration. The writer sends each write from a block it
// has just allocated and frees it after; the reader reads into blocks it
// allocates and frees likewise; every byte is checked.
constexpr uint64_t kFreedBuffersTotal = 24 * kMebibyte;

testing::Body freed_buffers_body() {
  return [](Stream& stream, Side side, int sync_socket, int, ChildReport& report) {
    const int64_t started = testing::monotonic_now();
    uint64_t state = our_seed(side) * 2654435761u + 1;
    const auto next_size = [&state] {
      state = state * 6364136223846793005u + 1442695040888963407u;
      return (uint64_t{128} << 10) + (state >> 33) % (4 * kMebibyte);
    };
    if (side == Side::server) {
      uint64_t offset = 0;
      while (offset < kFreedBuffersTotal) {
        const uint64_t size = std::min(next_size(), kFreedBuffersTotal - offset);
        auto* block = static_cast<uint8_t*>(std::malloc(size));
        if (block == nullptr) return testing::fail(report, 10, "malloc");
        stream::testing::fill_pattern(kServerSeed, offset, {block, size});
        const ssize_t sent = stream::testing::send_bytes(stream, {block, size});
        // Freed at once, as an application that writes from a temporary does.
        std::memset(block, 0xee, size);
        std::free(block);
        if (sent != static_cast<ssize_t>(size)) return testing::fail(report, 11, "send %zd", sent);
        offset += size;
      }
      report.bytes_sent = offset;
    } else {
      uint64_t offset = 0;
      while (offset < kFreedBuffersTotal) {
        const uint64_t size = std::min(next_size(), kFreedBuffersTotal - offset);
        auto* block = static_cast<uint8_t*>(std::malloc(size));
        if (block == nullptr) return testing::fail(report, 12, "malloc");
        const ssize_t got = stream::testing::receive_bytes(stream, {block, size}, MSG_WAITALL);
        const int64_t wrong =
            got == static_cast<ssize_t>(size)
                ? stream::testing::first_mismatch(kServerSeed, offset, {block, size})
                : 0;
        std::free(block);
        if (got != static_cast<ssize_t>(size)) return testing::fail(report, 13, "receive %zd", got);
        if (wrong != -1)
          return testing::fail(report, 14, "wrong byte at %llu",
                               static_cast<unsigned long long>(offset + wrong));
        offset += size;
      }
      report.bytes_received = offset;
    }
    report.elapsed_ns = testing::monotonic_now() - started;
    report.rendezvous_bytes_received = stream.rendezvous_counts().bytes_received;
    return close_in_turn(stream, side, sync_socket, report);
  };
}

TEST_F(VerbsStreamVmTest, BuffersFreedAndAllocatedAnewBetweenWritesKeepEveryByte) {
  ENDPOINTS_OR_SKIP(found, AF_INET);
  ProcessPair pair(*found, freed_buffers_body(), freed_buffers_body(), kChildLimit);
  stream::testing::Watchdog watchdog(kChildLimit + 30s, "verbs freed-buffers test");
  ChildReport server, client;
  ASSERT_NO_FATAL_FAILURE(expect_both_passed(pair, server, client));
  EXPECT_EQ(server.bytes_sent, kFreedBuffersTotal);
  EXPECT_EQ(client.bytes_received, kFreedBuffersTotal);
  // The reads went zero-copy: the writer wrote into the reader's fresh blocks.
  EXPECT_GT(client.rendezvous_bytes_received, kFreedBuffersTotal / 2);
  std::printf(
      "[ figures  ] IPv4 %llu B from freshly allocated and freed blocks in %.3f s: %.1f MB/s; "
      "%llu B by rendezvous\n",
      static_cast<unsigned long long>(kFreedBuffersTotal),
      static_cast<double>(client.elapsed_ns) / 1e9,
      megabytes_per_second(kFreedBuffersTotal, client.elapsed_ns),
      static_cast<unsigned long long>(client.rendezvous_bytes_received));
}

TEST_F(VerbsStreamVmTest, RandomSizesEachWayIpv6) {
  ENDPOINTS_OR_SKIP(found, AF_INET6);
  run_transfer(*found, {.bytes = 8 * kMebibyte}, "random sizes", true);
}

// 64-byte messages bounced back and forth: the round trip's median.
TEST_F(VerbsStreamVmTest, PingPongRoundTripsIpv4) {
  ENDPOINTS_OR_SKIP(found, AF_INET);
  constexpr int kWarmUp = 20;
  constexpr int kRoundTrips = 300;
  constexpr size_t kMessage = 64;
  const testing::Body body = [](Stream& stream, Side side, int sync_socket, int,
                                ChildReport& report) {
    std::vector<uint8_t> message(kMessage, 0x5a);
    std::vector<int64_t> round_trips;
    for (int round = 0; round < kWarmUp + kRoundTrips; ++round) {
      const int64_t started = testing::monotonic_now();
      if (side == Side::client) {
        message[0] = static_cast<uint8_t>(round);
        if (stream::testing::send_bytes(stream, message) != static_cast<ssize_t>(kMessage))
          return testing::fail(report, 10, "send of round %d", round);
      }
      if (stream::testing::receive_bytes(stream, message, MSG_WAITALL) !=
              static_cast<ssize_t>(kMessage) ||
          message[0] != static_cast<uint8_t>(round))
        return testing::fail(report, 11, "receive of round %d", round);
      if (side == Side::server &&
          stream::testing::send_bytes(stream, message) != static_cast<ssize_t>(kMessage))
        return testing::fail(report, 12, "echo of round %d", round);
      if (side == Side::client && round >= kWarmUp)
        round_trips.push_back(testing::monotonic_now() - started);
    }
    if (side == Side::client) {
      std::sort(round_trips.begin(), round_trips.end());
      report.round_trip_median_ns = round_trips[round_trips.size() / 2];
    }
    return close_in_turn(stream, side, sync_socket, report);
  };
  ProcessPair pair(*found, body, body, kChildLimit);
  stream::testing::Watchdog watchdog(kChildLimit + 30s, "verbs ping-pong test");
  ChildReport server, client;
  ASSERT_NO_FATAL_FAILURE(expect_both_passed(pair, server, client));
  std::printf(
      "[ figures  ] IPv4 64 B ping-pong (%s -> %s), %d round trips: median round trip "
      "%.1f us (half: %.1f us)\n",
      client.device, server.device, kRoundTrips,
      static_cast<double>(client.round_trip_median_ns) / 1e3,
      static_cast<double>(client.round_trip_median_ns) / 2e3);
}

// The victim writes and reads until it is killed; the survivor reads a
// while, asks the test process to kill the victim, and then its reads and
// writes must end (an error or end of stream) within a few seconds.
constexpr auto kSurvivorMostWait = 5s;

testing::Body victim_body() {
  return [](Stream& stream, Side side, int, int, ChildReport&) {
    stream::testing::transfer_both_ways(stream, our_seed(side), peer_seed(side),
                                        {.bytes = uint64_t{1} << 50});
    return 30;  // (never: it is killed)
  };
}

testing::Body survivor_body() {
  return [](Stream& stream, Side side, int, int report_socket, ChildReport& report) {
    std::atomic<int64_t> writer_ended{0};
    std::thread writer([&] {
      stream::testing::write_pattern(stream, our_seed(side), uint64_t{1} << 50, {0, 3});
      writer_ended = testing::monotonic_now();
    });
    const uint64_t before_kill =
        stream::testing::read_pattern(stream, peer_seed(side), 8 * kMebibyte, {0, 4});
    const char kill_now = 'k';
    stream::testing::send_all(report_socket, &kill_now, 1);
    const uint64_t after_kill =
        stream::testing::read_pattern(stream, peer_seed(side), uint64_t{1} << 50, {0, 5});
    report.reader_ended_ns = testing::monotonic_now();
    writer.join();
    report.writer_ended_ns = writer_ended;
    report.bytes_received = before_kill + after_kill;
    if (before_kill != 8 * kMebibyte)
      return testing::fail(report, 10, "short read before the kill");
    if (!stream.broken()) return testing::fail(report, 11, "the stream is not broken");
    return 0;
  };
}

void run_killed_peer(const Endpoints& endpoints, Side victim) {
  const Side survivor = victim == Side::server ? Side::client : Side::server;
  ProcessPair pair(endpoints, victim == Side::server ? victim_body() : survivor_body(),
                   victim == Side::server ? survivor_body() : victim_body(), kChildLimit);
  stream::testing::Watchdog watchdog(kChildLimit + 30s, "verbs killed-peer test");
  const std::optional<char> note = pair.note(survivor, kChildLimit);
  ASSERT_TRUE(note) << "the survivor never got going";
  pair.child(victim).kill_now();
  const int64_t killed_at = testing::monotonic_now();
  const std::optional<ChildReport> report = pair.report(survivor, 60s);
  ASSERT_TRUE(report) << "the survivor (" << testing::side_name(survivor)
                      << ") did not finish within 60 s of the kill";
  EXPECT_EQ(report->status, 0) << report->failure;
  const auto reader_took = std::chrono::nanoseconds(report->reader_ended_ns - killed_at);
  const auto writer_took = std::chrono::nanoseconds(report->writer_ended_ns - killed_at);
  EXPECT_LT(reader_took, kSurvivorMostWait);
  EXPECT_LT(writer_took, kSurvivorMostWait);
  std::printf(
      "[ figures  ] %s killed: the %s's reader ended %.1f ms and its writer %.1f ms after "
      "the kill\n",
      testing::side_name(victim), testing::side_name(survivor),
      static_cast<double>(reader_took.count()) / 1e6,
      static_cast<double>(writer_took.count()) / 1e6);
  EXPECT_EQ(pair.child(survivor).wait(30s), 0);
  EXPECT_EQ(pair.child(victim).wait(5s), -1);  // killed
}

TEST_F(VerbsStreamVmTest, AKilledServerEndsTheClientsCallsWithinSeconds) {
  ENDPOINTS_OR_SKIP(found, AF_INET);
  run_killed_peer(*found, Side::server);
}

TEST_F(VerbsStreamVmTest, AKilledClientEndsTheServersCallsWithinSeconds) {
  ENDPOINTS_OR_SKIP(found, AF_INET);
  run_killed_peer(*found, Side::client);
}

// --- establishment's failures: an answer within seconds, never a hang ---

// What a child's establishment attempt came to.
struct Attempt {
  int result = 1;  // 0 or -errno; 1: the child never said
  int64_t elapsed_ns = 0;
};

// Runs `attempt` in a child (the test process never touches verbs) and
// returns what it reported.
Attempt attempt_in_child(const std::function<int()>& attempt) {
  testing::SocketPair channel;
  stream::testing::ChildProcess child([&] {
    ::close(channel.fds[0]);
    stream::testing::Watchdog watchdog(60s, "verbs establishment attempt");
    Attempt made;
    const int64_t started = testing::monotonic_now();
    made.result = attempt();
    made.elapsed_ns = testing::monotonic_now() - started;
    stream::testing::send_all(channel.fds[1], &made, sizeof(made));
    return 0;
  });
  ::close(std::exchange(channel.fds[1], -1));
  Attempt made;
  testing::receive_within(channel.fds[0], &made, sizeof(made), 90s);
  EXPECT_EQ(child.wait(30s), 0);
  return made;
}

TEST_F(VerbsStreamVmTest, ConnectingWhereNobodyListensIsRefusedWithinSeconds) {
  ENDPOINTS_OR_SKIP(found, AF_INET);
  const Attempt made = attempt_in_child([&] {
    VerbsConnection connection;
    // rdma_cm's own port space: nothing listens on port 9 of it.
    return VerbsConnector(VerbsOptions{})
        .connect(found->client, testing::with_port(found->server, 9),
                 std::chrono::steady_clock::now() + 30s, connection);
  });
  EXPECT_EQ(made.result, -ECONNREFUSED);
  EXPECT_LT(std::chrono::nanoseconds(made.elapsed_ns), 5s);
}

// A connect request that carries no hello of ours (another rdma_cm program,
// an older qpsock) is rejected: the listener says -EPROTO, the connecting
// side is refused at once.
TEST_F(VerbsStreamVmTest, AConnectRequestWithoutAHelloIsRejected) {
  ENDPOINTS_OR_SKIP(found, AF_INET);
  testing::SocketPair ports;
  testing::SocketPair verdicts;
  stream::testing::ChildProcess listener_child([&] {
    stream::testing::Watchdog watchdog(60s, "verbs listener");
    std::unique_ptr<VerbsListener> listener;
    int result = VerbsListener::listen(found->server, VerbsOptions{}, listener);
    const uint16_t port = result == 0 ? listener->port() : 0;
    stream::testing::send_all(ports.fds[0], &port, sizeof(port));
    VerbsConnection connection;
    if (result == 0) result = listener->accept(std::chrono::steady_clock::now() + 30s, connection);
    stream::testing::send_all(verdicts.fds[0], &result, sizeof(result));
    return 0;
  });
  const Attempt made = attempt_in_child([&] {
    uint16_t port = 0;
    if (!testing::receive_within(ports.fds[1], &port, sizeof(port), 60s) || port == 0)
      return -EPIPE;
    // A plain rdma_cm connect, with private data that is not a hello.
    const Deadline deadline = std::chrono::steady_clock::now() + 30s;
    EventChannel events;
    if (int error = create_event_channel(events); error < 0) return error;
    rdma_cm_id* raw_id = nullptr;
    if (rdma_create_id(events.get(), &raw_id, nullptr, RDMA_PS_TCP) != 0) return -errno;
    CmId id(raw_id);
    sockaddr_storage client = found->client;
    sockaddr_storage server = testing::with_port(found->server, port);
    CmEvent event;
    if (rdma_resolve_addr(id.get(), reinterpret_cast<sockaddr*>(&client),
                          reinterpret_cast<sockaddr*>(&server), 5000) != 0)
      return -errno;
    if (int error = expect_cm_event(events.get(), RDMA_CM_EVENT_ADDR_RESOLVED, deadline, event))
      return error;
    event.reset();
    if (rdma_resolve_route(id.get(), 5000) != 0) return -errno;
    if (int error = expect_cm_event(events.get(), RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, event))
      return error;
    event.reset();
    static const char kNotAHello[] = "GET / HTTP/1.1\r\nHost: example\r\n\r\n";
    rdma_conn_param parameters = connection_parameters(kNotAHello, sizeof(kNotAHello), 1, 1);
    parameters.qp_num = 0x1234;  // no queue pair: the request never gets that far
    if (rdma_connect(id.get(), &parameters) != 0) return -errno;
    return expect_cm_event(events.get(), RDMA_CM_EVENT_ESTABLISHED, deadline, event);
  });
  EXPECT_EQ(made.result, -ECONNREFUSED);
  EXPECT_LT(std::chrono::nanoseconds(made.elapsed_ns), 10s);
  int listener_result = 1;
  EXPECT_TRUE(
      testing::receive_within(verdicts.fds[1], &listener_result, sizeof(listener_result), 60s));
  EXPECT_EQ(listener_result, -EPROTO);
  EXPECT_EQ(listener_child.wait(30s), 0);
}

// Memory a peer may touch is per connection: each connection has its own
// protection domain, so a remote key of one reaches nothing through another
// (the write fails, the memory is untouched), and a deregistered region is
// out of reach at once. Two connections between the same two processes.
struct OfferedRegion {
  uint64_t address;
  uint32_t key;
};

// Posts one 64-byte inline write of `value` at `where` and waits for its
// completion: its status (0, or the failure of a broken queue pair).
int write_and_wait(VerbsTransport& transport, stream::RemoteRegion where, uint8_t value) {
  std::array<std::byte, 64> bytes;
  bytes.fill(std::byte{value});
  const stream::LocalSlice slice{bytes.data(), bytes.size(), nullptr};
  if (int error = transport.post_write({&slice, 1}, where, std::nullopt, 7); error < 0) return error;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  std::array<stream::Completion, 4> completions;
  while (std::chrono::steady_clock::now() < deadline) {
    const int count = transport.poll(completions);
    for (int index = 0; index < count; ++index)
      if (completions[index].kind == stream::CompletionKind::write_done) return completions[index].status;
    if (count < 0) return count;
    std::this_thread::sleep_for(1ms);
  }
  return -ETIMEDOUT;
}

TEST_F(VerbsStreamVmTest, ARemoteKeyReachesNothingThroughAnotherConnectionNorAfterDeregistration) {
  ENDPOINTS_OR_SKIP(found, AF_INET);
  testing::SocketPair channel;  // [0]: the server's end, [1]: the client's
  stream::testing::ChildProcess server_child([&] {
    ::close(channel.fds[1]);
    stream::testing::Watchdog watchdog(90s, "verbs isolation server");
    std::unique_ptr<VerbsListener> listener;
    if (VerbsListener::listen(found->server, VerbsOptions{}, listener) != 0) return 2;
    const uint16_t port = listener->port();
    stream::testing::send_all(channel.fds[0], &port, sizeof(port));
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    VerbsConnection first, second;
    if (listener->accept(deadline, first) != 0 || listener->accept(deadline, second) != 0) return 3;
    // Writable by the peer of the first connection only.
    std::vector<std::byte> memory(4096, std::byte{0});
    std::unique_ptr<stream::MemoryRegistration> registration;
    if (first.transport->register_memory(memory.data(), memory.size(),
                                         stream::MemoryAccess::remote_write, registration) != 0)
      return 4;
    const OfferedRegion offered{reinterpret_cast<uint64_t>(memory.data()), registration->remote_key()};
    stream::testing::send_all(channel.fds[0], &offered, sizeof(offered));
    char step = 0;
    // The client has written through both connections: revoke the region.
    if (!testing::receive_within(channel.fds[0], &step, 1, 60s)) return 5;
    registration.reset();
    stream::testing::send_all(channel.fds[0], &step, 1);
    // The client has written once more, after the revocation.
    if (!testing::receive_within(channel.fds[0], &step, 1, 60s)) return 6;
    const auto all = [&](size_t from, uint8_t value) {
      for (size_t index = from; index < from + 64; ++index)
        if (memory[index] != std::byte{value}) return false;
      return true;
    };
    if (!all(0, 0)) return 10;     // the other connection's write: nothing landed
    if (!all(64, 0xAA)) return 11; // the first connection's own write landed
    if (!all(128, 0)) return 12;   // the write after deregistration: nothing landed
    return 0;
  });
  stream::testing::ChildProcess client_child([&] {
    ::close(channel.fds[0]);
    stream::testing::Watchdog watchdog(90s, "verbs isolation client");
    uint16_t port = 0;
    if (!testing::receive_within(channel.fds[1], &port, sizeof(port), 60s)) return 2;
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    const sockaddr_storage server = testing::with_port(found->server, port);
    VerbsConnection first, second;
    if (VerbsConnector(VerbsOptions{}).connect(found->client, server, deadline, first) != 0 ||
        VerbsConnector(VerbsOptions{}).connect(found->client, server, deadline, second) != 0)
      return 3;
    OfferedRegion offered{};
    if (!testing::receive_within(channel.fds[1], &offered, sizeof(offered), 60s)) return 4;
    // The first connection's key, through the second connection: refused.
    if (write_and_wait(*second.transport, {offered.address, offered.key}, 0xBB) == 0) return 10;
    // Through its own connection: it lands.
    if (write_and_wait(*first.transport, {offered.address + 64, offered.key}, 0xAA) != 0) return 11;
    char step = 1;
    stream::testing::send_all(channel.fds[1], &step, 1);
    if (!testing::receive_within(channel.fds[1], &step, 1, 60s)) return 5;
    // Deregistered by its owner: refused even through its own connection.
    if (write_and_wait(*first.transport, {offered.address + 128, offered.key}, 0xCC) == 0) return 12;
    stream::testing::send_all(channel.fds[1], &step, 1);
    return 0;
  });
  channel.close_both();
  EXPECT_EQ(client_child.wait(120s), 0) << "the client's step that failed (see the test's comments)";
  EXPECT_EQ(server_child.wait(120s), 0) << "the server's step that failed (see the test's comments)";
}

}  // namespace
}  // namespace qpsock::transport::verbs
