// many_connections: many connections open at once between two processes,
// each echoing a block that is checked byte for byte, twice, with the
// connections idle in between: what a process pays per connection it holds
// (descriptors, resident and pinned memory) and how long the whole takes.
//
//   many_connections server [--host H] [--port P] [--port-file F] [--connections N]
//   many_connections client --host H --port P [--connections N] [--size S]
//                           [--idle SECONDS] [--connecting C]
//
// The client opens N connections (at most C connecting at a time, 256 by
// default, so that the listener's backlog never drops a SYN), sends S bytes
// (64K) on each and reads the echo back; once all have, it holds them idle
// for SECONDS (2; an upgrade happens then), measures itself, echoes S bytes
// on each again and closes them all. The server (epoll, level-triggered)
// echoes until N connections have come and gone, and measures itself
// whenever it has been quiet for 200 ms with all N open. Each prints one
// JSON line on stdout: descriptors open, VmRSS and VmPin (KiB), and for the
// client the seconds of the active part (connects, both echoes, closes;
// not the idle pause).
#include <fcntl.h>
#include <sys/epoll.h>
#include <time.h>

#include <algorithm>
#include <cinttypes>
#include <filesystem>
#include <fstream>
#include <vector>

#include "bench_net.h"

namespace {

using namespace bench;

[[noreturn]] void usage() {
  std::fputs(
      "usage: many_connections server [--host H] [--port P] [--port-file F] [--connections N]\n"
      "       many_connections client --host H --port P [--connections N] [--size S]\n"
      "                               [--idle SECONDS] [--connecting C]\n",
      stderr);
  std::exit(2);
}

struct Footprint {
  long descriptors = 0;
  long rss_kib = 0;
  long pin_kib = 0;
};

Footprint measure() {
  Footprint footprint;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
    ++footprint.descriptors;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) footprint.rss_kib = std::strtol(line.c_str() + 6, nullptr, 10);
    if (line.rfind("VmPin:", 0) == 0) footprint.pin_kib = std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return footprint;
}

void set_nonblocking(int fd) {
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) die_errno("fcntl");
}

void watch(int epoll_fd, int operation, int fd, uint32_t events, uint64_t data) {
  epoll_event event{};
  event.events = events;
  event.data.u64 = data;
  if (epoll_ctl(epoll_fd, operation, fd, &event) != 0) die_errno("epoll_ctl");
}

// ---- server ----

struct Echo {
  int fd = -1;
  std::vector<unsigned char> pending;  // read, not yet written back
  size_t written = 0;
};

[[noreturn]] void serve(int listener, long connections) {
  set_nonblocking(listener);
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) die_errno("epoll_create1");
  constexpr uint64_t kListener = ~uint64_t{0};
  watch(epoll_fd, EPOLL_CTL_ADD, listener, EPOLLIN, kListener);
  std::vector<Echo> echoes;
  std::vector<uint64_t> free_slots;
  long accepted = 0, closed = 0, open = 0;
  Footprint most;
  std::vector<unsigned char> buffer(256 * 1024);
  std::vector<epoll_event> events(256);
  while (closed < connections) {
    const int ready = epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), 200);
    if (ready < 0 && errno != EINTR) die_errno("epoll_wait");
    if (ready == 0 && open == connections) {
      const Footprint now = measure();
      most.descriptors = std::max(most.descriptors, now.descriptors);
      most.rss_kib = std::max(most.rss_kib, now.rss_kib);
      most.pin_kib = std::max(most.pin_kib, now.pin_kib);
    }
    for (int index = 0; index < ready; ++index) {
      const uint64_t data = events[index].data.u64;
      if (data == kListener) {
        for (;;) {
          const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
          if (fd < 0) {
            if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) break;
            die_errno("accept4");
          }
          uint64_t slot = echoes.size();
          if (!free_slots.empty()) {
            slot = free_slots.back();
            free_slots.pop_back();
          } else {
            echoes.emplace_back();
          }
          echoes[slot] = Echo{fd, {}, 0};
          watch(epoll_fd, EPOLL_CTL_ADD, fd, EPOLLIN, slot);
          ++accepted;
          ++open;
        }
        continue;
      }
      Echo& echo = echoes[data];
      if (echo.pending.empty()) {
        const ssize_t got = read(echo.fd, buffer.data(), buffer.size());
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (got <= 0) {
          if (got < 0) die_errno("read");
          close(echo.fd);
          echo = Echo{};
          free_slots.push_back(data);
          ++closed;
          --open;
          continue;
        }
        echo.pending.assign(buffer.data(), buffer.data() + got);
        echo.written = 0;
      }
      const ssize_t sent = write(echo.fd, echo.pending.data() + echo.written, echo.pending.size() - echo.written);
      if (sent < 0 && errno != EAGAIN && errno != EINTR) die_errno("write");
      if (sent > 0) echo.written += static_cast<size_t>(sent);
      const bool done = echo.written == echo.pending.size();
      // An idle connection keeps no buffer (as a server holding many would).
      if (done) std::vector<unsigned char>().swap(echo.pending);
      // Wait for room while an answer is unsent, for the next request once it is.
      watch(epoll_fd, EPOLL_CTL_MOD, echo.fd, done ? EPOLLIN : EPOLLOUT, data);
    }
  }
  std::printf("{\"role\": \"server\", \"connections\": %ld, \"descriptors\": %ld, \"rss_kib\": %ld, "
              "\"pin_kib\": %ld}\n",
              accepted, most.descriptors, most.rss_kib, most.pin_kib);
  std::exit(0);
}

// ---- client ----

struct Exchange {
  int fd = -1;
  bool connected = false;
  size_t sent = 0;
  size_t received = 0;
};

unsigned char pattern(long connection, long round, size_t at) {
  return static_cast<unsigned char>((connection * 131 + round * 7 + static_cast<long>(at) * 29) >> 1);
}

void run_client(const std::string& host, const std::string& port, long connections, size_t size,
                double idle_seconds, long connecting_at_once) {
  addrinfo* address = resolve(host.c_str(), port.c_str(), false);
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) die_errno("epoll_create1");
  std::vector<Exchange> exchanges(static_cast<size_t>(connections));
  std::vector<unsigned char> outgoing(size), incoming(256 * 1024);
  std::vector<epoll_event> events(256);
  long opened = 0, connected = 0;

  // One round: every connection sends `size` bytes and reads them back;
  // connections not yet opened are opened on the way (round 0).
  auto exchange = [&](long round) {
    long finished = 0;
    for (Exchange& each : exchanges) each.sent = each.received = 0;
    if (round > 0) {
      for (long index = 0; index < connections; ++index)
        watch(epoll_fd, EPOLL_CTL_MOD, exchanges[static_cast<size_t>(index)].fd, EPOLLOUT,
              static_cast<uint64_t>(index));
    }
    while (finished < connections) {
      while (round == 0 && opened < connections && opened - connected < connecting_at_once) {
        const int fd = socket(address->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) die_errno("socket");
        if (connect(fd, address->ai_addr, address->ai_addrlen) != 0 && errno != EINPROGRESS)
          die_errno("connect");
        exchanges[static_cast<size_t>(opened)].fd = fd;
        watch(epoll_fd, EPOLL_CTL_ADD, fd, EPOLLOUT, static_cast<uint64_t>(opened));
        ++opened;
      }
      const int ready = epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), 10000);
      if (ready < 0 && errno != EINTR) die_errno("epoll_wait");
      if (ready == 0) die("no progress for 10 s");
      for (int index = 0; index < ready; ++index) {
        const long connection = static_cast<long>(events[index].data.u64);
        Exchange& each = exchanges[static_cast<size_t>(connection)];
        if (each.received == size && each.sent == size) {
          std::fprintf(stderr, "connection %ld (fd %d), round %ld: events %#x after its echo\n", connection,
                       each.fd, round, events[index].events);
          std::exit(1);
        }
        if (!each.connected) {
          int error = 0;
          socklen_t length = sizeof error;
          getsockopt(each.fd, SOL_SOCKET, SO_ERROR, &error, &length);
          if (error != 0) {
            errno = error;
            die_errno("connect");
          }
          each.connected = true;
          ++connected;
        }
        if (each.sent < size) {
          for (size_t at = each.sent; at < size; ++at) outgoing[at] = pattern(connection, round, at);
          const ssize_t sent = write(each.fd, outgoing.data() + each.sent, size - each.sent);
          if (sent < 0 && errno != EAGAIN && errno != EINTR) die_errno("write");
          if (sent > 0) each.sent += static_cast<size_t>(sent);
          if (each.sent == size) watch(epoll_fd, EPOLL_CTL_MOD, each.fd, EPOLLIN, static_cast<uint64_t>(connection));
          continue;
        }
        const ssize_t got = read(each.fd, incoming.data(), std::min(incoming.size(), size - each.received));
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (got < 0) {
          std::fprintf(stderr, "connection %ld (fd %d), round %ld: read after %zu bytes of its echo: %s\n",
                       connection, each.fd, round, each.received, std::strerror(errno));
          std::exit(1);
        }
        if (got == 0) {
          std::fprintf(stderr, "connection %ld (fd %d), round %ld: the server closed it after %zu of %zu "
                       "bytes of its echo\n", connection, each.fd, round, each.received, size);
          std::exit(1);
        }
        for (ssize_t at = 0; at < got; ++at) {
          if (incoming[static_cast<size_t>(at)] != pattern(connection, round, each.received + static_cast<size_t>(at))) {
            std::fprintf(stderr, "connection %ld (fd %d), round %ld: byte %zu of its echo differs\n", connection,
                         each.fd, round, each.received + static_cast<size_t>(at));
            std::exit(1);
          }
        }
        each.received += static_cast<size_t>(got);
        if (each.received == size) {
          watch(epoll_fd, EPOLL_CTL_MOD, each.fd, 0, static_cast<uint64_t>(connection));
          ++finished;
        }
      }
    }
  };

  const uint64_t start = now_ns();
  exchange(0);
  const uint64_t first_round = now_ns() - start;
  const timespec pause{static_cast<time_t>(idle_seconds),
                       static_cast<long>((idle_seconds - static_cast<double>(static_cast<time_t>(idle_seconds))) * 1e9)};
  nanosleep(&pause, nullptr);
  const Footprint held = measure();
  const uint64_t resumed = now_ns();
  exchange(1);
  for (Exchange& each : exchanges) close(each.fd);
  const uint64_t active = first_round + (now_ns() - resumed);
  freeaddrinfo(address);
  std::printf("{\"role\": \"client\", \"connections\": %ld, \"size\": %zu, \"active_seconds\": %.3f, "
              "\"descriptors\": %ld, \"rss_kib\": %ld, \"pin_kib\": %ld}\n",
              connections, size, static_cast<double>(active) / 1e9, held.descriptors, held.rss_kib,
              held.pin_kib);
}

}  // namespace

int main(int argc, char** argv) {
  Args args(argc, argv);
  if (args.done()) usage();
  const std::string mode(args.next());
  EndpointOptions options;
  options.size = 64 * 1024;
  long connecting = 256;
  double idle = 2;
  while (!args.done()) {
    std::string_view value;
    if (endpoint_option(args, options)) continue;
    if (args.option("--idle", value)) idle = parse_double(value);
    else if (args.option("--connecting", value)) connecting = static_cast<long>(parse_size(value));
    else usage();
  }
  const auto& [host, port, port_file, connections, size] = options;
  if (size == 0 || connections <= 0 || connecting <= 0 || idle < 0) usage();
  if (mode == "server") {
    int bound = 0;
    const int listener = listen_on(host, port, &bound);
    if (listen(listener, 4096) != 0) die_errno("listen");
    write_port_file(port_file, bound);
    serve(listener, connections);
  }
  if (mode == "client") {
    run_client(host, port, connections, size, idle, connecting);
    return 0;
  }
  usage();
}
