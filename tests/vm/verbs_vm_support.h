// Helpers for the tests that run the stream engine over real verbs in the
// Soft-RoCE harness (scripts/softroce: rxe0 on v0 10.77.0.1 / fd77::1, rxe1
// on v1 10.77.0.2 / fd77::2), header-only:
// - whether the harness is here (the tests skip, with the reason, when not);
// - which RDMA device serves an address, and its packet counters;
// - a server and a client, each a forked child of the test process, each
//   with a Stream over a VerbsTransport to the other, and a report each
//   sends the test process at the end.
//
// The test process itself never touches verbs or rdma_cm (only sysfs): a
// child forked from a process with open verbs contexts would share them.
#pragma once

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "stream/stream.h"
#include "support/process_pair.h"
#include "support/stream_test_support.h"
#include "transport/verbs/verbs_connector.h"
#include "transport/verbs/verbs_listener.h"

namespace qpsock::transport::verbs::testing {

using namespace std::chrono_literals;
using stream::Stream;
using stream::StreamSettings;

// --- addresses --------------------------------------------------------------

inline std::optional<sockaddr_storage> parse_address(const char* text, uint16_t port = 0) {
  sockaddr_storage address{};
  auto* ipv4 = reinterpret_cast<sockaddr_in*>(&address);
  auto* ipv6 = reinterpret_cast<sockaddr_in6*>(&address);
  if (inet_pton(AF_INET, text, &ipv4->sin_addr) == 1) {
    ipv4->sin_family = AF_INET;
    ipv4->sin_port = htons(port);
    return address;
  }
  if (inet_pton(AF_INET6, text, &ipv6->sin6_addr) == 1) {
    ipv6->sin6_family = AF_INET6;
    ipv6->sin6_port = htons(port);
    return address;
  }
  return std::nullopt;
}

inline sockaddr_storage with_port(sockaddr_storage address, uint16_t port) {
  if (address.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(&address)->sin_port = htons(port);
  else
    reinterpret_cast<sockaddr_in6*>(&address)->sin6_port = htons(port);
  return address;
}

// The interface holding `address` on this host, or "".
inline std::string interface_with_address(const sockaddr_storage& address) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* entry = list; entry != nullptr && found.empty(); entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != address.ss_family) continue;
    const bool same =
        address.ss_family == AF_INET
            ? std::memcmp(&reinterpret_cast<const sockaddr_in*>(entry->ifa_addr)->sin_addr,
                          &reinterpret_cast<const sockaddr_in*>(&address)->sin_addr,
                          sizeof(in_addr)) == 0
            : std::memcmp(&reinterpret_cast<const sockaddr_in6*>(entry->ifa_addr)->sin6_addr,
                          &reinterpret_cast<const sockaddr_in6*>(&address)->sin6_addr,
                          sizeof(in6_addr)) == 0;
    if (same) found = entry->ifa_name;
  }
  freeifaddrs(list);
  return found;
}

inline std::string first_line(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

// The RDMA device (port 1) whose network device holds `address`, or "".
// rxe names its netdev in `parent`; other devices in gid_attrs/ndevs/0.
inline std::string device_for_address(const sockaddr_storage& address) {
  const std::string interface = interface_with_address(address);
  std::error_code error;
  if (interface.empty()) return "";
  for (const auto& device : std::filesystem::directory_iterator("/sys/class/infiniband", error)) {
    if (first_line(device.path() / "parent") == interface ||
        first_line(device.path() / "ports/1/gid_attrs/ndevs/0") == interface)
      return device.path().filename().string();
  }
  return "";
}

struct PortCounters {
  uint64_t sent_packets = 0;
  uint64_t received_packets = 0;
  uint64_t retries = 0;  // completer_retry_err: requests sent again after a timeout
};

inline PortCounters read_counters(const std::string& device) {
  const std::filesystem::path counters =
      std::filesystem::path("/sys/class/infiniband") / device / "ports/1/hw_counters";
  PortCounters read;
  read.sent_packets = std::strtoull(first_line(counters / "sent_pkts").c_str(), nullptr, 10);
  read.received_packets = std::strtoull(first_line(counters / "rcvd_pkts").c_str(), nullptr, 10);
  read.retries = std::strtoull(first_line(counters / "completer_retry_err").c_str(), nullptr, 10);
  return read;
}

// The two ends of a test connection: the server listens at `server` (its
// port is picked at listen), the client connects from `client`.
struct Endpoints {
  const char* label;
  sockaddr_storage server;
  sockaddr_storage client;
  std::string server_device;
  std::string client_device;
};

// The harness's addresses, or the reason they are not usable here.
inline std::optional<Endpoints> harness_endpoints(const char* label, const char* server,
                                                  const char* client, std::string& missing) {
  struct stat info {};
  if (::stat("/dev/infiniband/rdma_cm", &info) != 0) {
    missing =
        "no RDMA device here (/dev/infiniband/rdma_cm is missing): run it in the "
        "Soft-RoCE VM (tests/vm/run-vm-suite)";
    return std::nullopt;
  }
  Endpoints endpoints{label, *parse_address(server), *parse_address(client), "", ""};
  endpoints.server_device = device_for_address(endpoints.server);
  endpoints.client_device = device_for_address(endpoints.client);
  if (endpoints.server_device.empty() || endpoints.client_device.empty()) {
    missing = std::string("the Soft-RoCE harness addresses ") + server + " and " + client +
              " are not served by RDMA devices here (scripts/softroce/local-rxe up)";
    return std::nullopt;
  }
  return endpoints;
}

// --- the two processes --------------------------------------------------------

enum class Side { server, client };
inline const char* side_name(Side side) { return side == Side::server ? "server" : "client"; }

inline int64_t monotonic_now() {
  return std::chrono::steady_clock::now().time_since_epoch().count();
}

// What each child tells the test process when it is done.
struct ChildReport {
  int32_t status = -1;  // 0: every check of the child passed
  uint32_t path_mtu = 0;
  uint32_t max_inline = 0;
  uint32_t max_reads = 0;
  uint32_t send_queue_depth = 0;
  uint32_t notification_capacity = 0;
  bool rendezvous_by_write = false;  // VerbsConnection::stream_settings chose RDMA WRITE
  uint64_t rendezvous_bytes_received = 0;  // Stream::rendezvous_counts, at the end
  int64_t elapsed_ns = 0;  // the measured part
  int64_t round_trip_median_ns = 0;
  int64_t reader_ended_ns = 0;  // steady clock (shared by the processes of one host)
  int64_t writer_ended_ns = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  char device[32] = {};
  char failure[160] = {};
};

// Records why the child failed; returns `status`.
inline int fail(ChildReport& report, int status, const char* format, ...)
    __attribute__((format(printf, 3, 4)));
inline int fail(ChildReport& report, int status, const char* format, ...) {
  va_list arguments;
  va_start(arguments, format);
  std::vsnprintf(report.failure, sizeof(report.failure), format, arguments);
  va_end(arguments);
  return status;
}

// 1 MiB ring, 64 KiB chunks. Under the VM's emulation a reading thread can
// take longer than the default 10 ms patience to come to a rendezvous, which
// is then withdrawn and copied; the tests that require zero-copy must not
// depend on that timing.
inline StreamSettings vm_settings() {
  StreamSettings settings;
  settings.rendezvous_patience = std::chrono::seconds{1};
  return settings;
}

// Establishes the verbs connection (the server listens and tells the client
// its port on `sync_socket`) and the Stream over it. 0, or a failure status.
inline int open_stream(Side side, const Endpoints& endpoints, int sync_socket,
                       const StreamSettings& settings, ChildReport& report,
                       std::unique_ptr<Stream>& stream) {
  VerbsOptions options;
  options.ring_size = settings.ring_size;
  const Deadline deadline = std::chrono::steady_clock::now() + 60s;
  VerbsConnection connection;
  if (side == Side::server) {
    std::unique_ptr<VerbsListener> listener;
    if (int error = VerbsListener::listen(endpoints.server, options, listener); error < 0)
      return fail(report, 2, "listen: %s", strerror(-error));
    const uint16_t port = listener->port();
    if (!stream::testing::send_all(sync_socket, &port, sizeof(port)))
      return fail(report, 3, "could not tell the client the port");
    if (int error = listener->accept(deadline, connection); error < 0)
      return fail(report, 4, "accept: %s", strerror(-error));
  } else {
    uint16_t port = 0;
    if (!stream::testing::receive_all(sync_socket, &port, sizeof(port)))
      return fail(report, 3, "no port from the server");
    if (int error = VerbsConnector(options).connect(
            endpoints.client, with_port(endpoints.server, port), deadline, connection);
        error < 0)
      return fail(report, 4, "connect: %s", strerror(-error));
  }
  const VerbsTransport& transport = *connection.transport;
  report.path_mtu = transport.path_mtu();
  report.max_inline = static_cast<uint32_t>(transport.max_inline());
  report.max_reads = transport.max_outstanding_reads();
  report.send_queue_depth = transport.send_queue_depth();
  report.notification_capacity = transport.notification_capacity();
  std::snprintf(report.device, sizeof(report.device), "%s", transport.device_name());
  const stream::StreamEndpoint announced = transport.local_endpoint();
  // The harness's devices are Soft-RoCE: both hellos must say so, and the
  // stream must never pull a rendezvous by RDMA reads (a retransmitted read
  // could fail the queue pair): both ends write them.
  if (!transport.reads_unreliable() ||
      (connection.peer_capabilities & kHelloReadsUnreliable) == 0)
    return fail(report, 8, "Soft-RoCE not recognised: ours %d, the peer's hello %d",
                transport.reads_unreliable(), connection.peer_capabilities);
  const StreamSettings used = connection.stream_settings(settings);
  report.rendezvous_by_write = used.rendezvous_method == stream::RendezvousMethod::write &&
                               used.rendezvous_threshold != stream::kNoRendezvous;
  if (int error = Stream::create(std::move(connection.transport), used, nullptr, stream);
      error < 0)
    return fail(report, 5, "Stream::create: %s", strerror(-error));
  const stream::StreamEndpoint local = stream->local_endpoint();
  if (local.ring_address != announced.ring_address || local.ring_key != announced.ring_key ||
      local.ring_size != announced.ring_size ||
      local.notification_capacity != announced.notification_capacity)
    return fail(report, 6, "the Stream's endpoint is not the one the hello announced");
  if (int error = stream->connect(connection.peer_endpoint); error < 0)
    return fail(report, 7, "Stream::connect: %s", strerror(-error));
  return 0;
}

// What a child does once its Stream is connected: 0, or a failure status.
// `report_socket` may carry a one-byte note to the test process first.
using Body = std::function<int(Stream& stream, Side side, int sync_socket, int report_socket,
                               ChildReport& report)>;

// One side, in its child: connect, run `body`, report. The exit status is
// the report's.
inline int run_side(Side side, const Endpoints& endpoints, int sync_socket, int report_socket,
                    const Body& body, std::chrono::seconds limit) {
  stream::testing::Watchdog watchdog(limit, side == Side::server ? "verbs server" : "verbs client");
  ChildReport report;
  std::unique_ptr<Stream> stream;
  int status = open_stream(side, endpoints, sync_socket, vm_settings(), report, stream);
  if (status == 0) status = body(*stream, side, sync_socket, report_socket, report);
  report.status = status;
  stream::testing::send_all(report_socket, &report, sizeof(report));
  return status;
}

// An AF_UNIX stream socketpair, closed when it goes (each child closes the
// ends that are not its own at once, so that a peer's death is an EOF).
struct SocketPair {
  SocketPair() { ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds); }
  ~SocketPair() { close_both(); }
  SocketPair(const SocketPair&) = delete;
  SocketPair& operator=(const SocketPair&) = delete;
  void close_both() {
    for (int& fd : fds)
      if (fd >= 0) ::close(std::exchange(fd, -1));
  }
  int fds[2] = {-1, -1};
};

// Receives exactly `length` bytes within `limit`; false on EOF or timeout.
inline bool receive_within(int socket, void* data, size_t length, std::chrono::seconds limit) {
  auto* into = static_cast<char*>(data);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (length > 0) {
    const int wait = milliseconds_until(deadline);
    pollfd readable{socket, POLLIN, 0};
    if (wait == 0 || ::poll(&readable, 1, wait) <= 0) return false;
    const ssize_t got = ::recv(socket, into, length, 0);
    if (got <= 0) return false;
    into += got;
    length -= static_cast<size_t>(got);
  }
  return true;
}

// A server child and a client child, as the test process sees them.
class ProcessPair {
 public:
  ProcessPair(const Endpoints& endpoints, const Body& server_body, const Body& client_body,
              std::chrono::seconds limit) {
    SocketPair sync;
    server_ = std::make_unique<stream::testing::ChildProcess>([&] {
      ::close(sync.fds[1]);
      ::close(server_reports_.fds[0]);
      ::close(client_reports_.fds[0]);
      ::close(client_reports_.fds[1]);
      return run_side(Side::server, endpoints, sync.fds[0], server_reports_.fds[1], server_body,
                      limit);
    });
    client_ = std::make_unique<stream::testing::ChildProcess>([&] {
      ::close(sync.fds[0]);
      ::close(client_reports_.fds[0]);
      ::close(server_reports_.fds[0]);
      ::close(server_reports_.fds[1]);
      return run_side(Side::client, endpoints, sync.fds[1], client_reports_.fds[1], client_body,
                      limit);
    });
    // Only the children hold the other ends: a child's death is an EOF.
    ::close(std::exchange(server_reports_.fds[1], -1));
    ::close(std::exchange(client_reports_.fds[1], -1));
  }

  stream::testing::ChildProcess& child(Side side) {
    return side == Side::server ? *server_ : *client_;
  }
  int report_socket(Side side) const {
    return side == Side::server ? server_reports_.fds[0] : client_reports_.fds[0];
  }
  // The child's one-byte note, if it sends one within `limit`.
  std::optional<char> note(Side side, std::chrono::seconds limit) {
    char note = 0;
    if (!receive_within(report_socket(side), &note, 1, limit)) return std::nullopt;
    return note;
  }
  std::optional<ChildReport> report(Side side, std::chrono::seconds limit) {
    ChildReport report;
    if (!receive_within(report_socket(side), &report, sizeof(report), limit)) return std::nullopt;
    return report;
  }

 private:
  SocketPair server_reports_;
  SocketPair client_reports_;
  std::unique_ptr<stream::testing::ChildProcess> server_;
  std::unique_ptr<stream::testing::ChildProcess> client_;
};

}  // namespace qpsock::transport::verbs::testing
