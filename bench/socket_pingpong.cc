// socket_pingpong: TCP ping-pong latency (TCP_NODELAY, blocking sockets).
//
//   socket_pingpong server [PORT] [--host ADDR] [--port-file FILE] [--connections N]
//   socket_pingpong client HOST PORT [--size 64] [--iterations 100000] [--warmup 10000]
//                                    [--warmup-seconds S] [--pause-us N]
//   socket_pingpong local [--host 127.0.0.1] [client options]
//
// The client sends a SIZE-byte message and waits for the server to echo it
// back; a round trip is timed with CLOCK_MONOTONIC and halved. After WARMUP
// untimed round trips (and at least S seconds of them: an interposer that
// upgrades the connection in the background, as qpsock does, carries the
// first ones on TCP) it reports the median, 99th percentile, mean, minimum
// and maximum of ITERATIONS timed ones: a JSON line on stdout and a human
// line on stderr, with the client's CPU time (user + system) per round
// trip. Echoes are checked (a sequence number at both ends of each
// message). "local" forks a server process on an ephemeral port, so both
// ends are separate processes, each with whatever is preloaded.
//
// --pause-us N sleeps N microseconds between each write and its read, so
// that the read finds the echo waiting: the round trips then time the pause,
// but an instruction count of the client (bench/count-instructions) holds
// each message's send and receive paths and no busy-wait.
//
// The server serves N connections one after another (default 1; 0 = forever)
// and learns the message size from a small header the client sends first.
#include <arpa/inet.h>

#include <algorithm>
#include <ctime>
#include <vector>

#include "bench_net.h"

namespace {

constexpr std::uint32_t kMagic = 0x51505050;  // "QPPP"

struct Header {
  std::uint32_t magic;
  std::uint32_t size;
};

void usage() {
  std::fputs(
      "usage: socket_pingpong server [PORT] [--host ADDR] [--port-file FILE] [--connections N]\n"
      "       socket_pingpong client HOST PORT [--bind ADDR] [--size BYTES] [--iterations N] [--warmup N]\n"
      "                              [--warmup-seconds S] [--pause-us N]\n"
      "       socket_pingpong local [--host ADDR] [--size BYTES] [--iterations N] [--warmup N]\n",
      stderr);
  std::exit(2);
}

// Echoes SIZE-byte messages until the client closes the connection.
void serve_connection(int fd) {
  Header header{};
  if (!bench::read_full(fd, &header, sizeof header)) return;
  if (ntohl(header.magic) != kMagic) bench::die("server: not a socket_pingpong client");
  std::size_t size = ntohl(header.size);
  if (size == 0 || size > (1u << 30)) bench::die("server: bad message size");
  std::vector<char> message(size);
  while (bench::read_full(fd, message.data(), size)) bench::write_full(fd, message.data(), size);
  close(fd);
}

void serve(int listener, long connections) {
  for (long served = 0; connections == 0 || served < connections; ++served)
    serve_connection(bench::accept_one(listener));
  close(listener);
}

struct ClientOptions {
  std::size_t size = 64;
  long iterations = 100000;
  long warmup = 10000;
  double warmup_seconds = 0;
  long pause_us = 0;
};

bool client_option(bench::Args& args, ClientOptions& options) {
  std::string_view value;
  if (args.option("--size", value)) options.size = bench::parse_size(value);
  else if (args.option("--iterations", value)) options.iterations = long(bench::parse_size(value));
  else if (args.option("--warmup", value)) options.warmup = long(bench::parse_size(value));
  else if (args.option("--warmup-seconds", value)) options.warmup_seconds = bench::parse_double(value);
  else if (args.option("--pause-us", value)) options.pause_us = long(bench::parse_size(value));
  else return false;
  return true;
}

void stamp(char* message, std::size_t size, std::uint64_t sequence) {
  std::size_t n = std::min<std::size_t>(8, size);
  std::memcpy(message, &sequence, n);
  std::memcpy(message + size - n, &sequence, n);
}

int run_client(const std::string& host, const std::string& port, const ClientOptions& options) {
  if (options.size == 0 || options.size > (1u << 30)) bench::die("--size must be 1..1G");
  if (options.iterations <= 0 || options.warmup < 0) bench::die("--iterations must be > 0");
  int fd = bench::connect_to(host, port);
  Header header{htonl(kMagic), htonl(std::uint32_t(options.size))};
  bench::write_full(fd, &header, sizeof header);

  std::vector<char> out(options.size, 'q'), in(options.size);
  std::vector<std::uint64_t> half_rtt_ns;
  half_rtt_ns.reserve(std::size_t(options.iterations));
  // The warm-up lasts `warmup` round trips and at least `warmup_seconds`.
  const std::uint64_t warmup_end = bench::now_ns() + std::uint64_t(options.warmup_seconds * 1e9);
  long warmup = options.warmup;
  std::uint64_t cpu_start = 0;
  for (long i = 0; i < warmup + options.iterations; ++i) {
    if (i == warmup && bench::now_ns() < warmup_end) ++warmup;
    if (i == warmup) cpu_start = bench::cpu_ns();
    stamp(out.data(), options.size, std::uint64_t(i));
    std::uint64_t start = bench::now_ns();
    bench::write_full(fd, out.data(), options.size);
    if (options.pause_us > 0) {
      const timespec pause{options.pause_us / 1000000, options.pause_us % 1000000 * 1000};
      nanosleep(&pause, nullptr);
    }
    if (!bench::read_full(fd, in.data(), options.size)) bench::die("server closed early");
    std::uint64_t end = bench::now_ns();
    if (std::memcmp(in.data(), out.data(), std::min<std::size_t>(8, options.size)) != 0 ||
        std::memcmp(in.data() + options.size - std::min<std::size_t>(8, options.size),
                    out.data() + options.size - std::min<std::size_t>(8, options.size),
                    std::min<std::size_t>(8, options.size)) != 0)
      bench::die("echo mismatch: the server returned different bytes");
    if (i >= warmup) half_rtt_ns.push_back((end - start) / 2);
  }
  // CPU time per round trip at this end: what the interposer adds to each
  // call shows here even when the machine is busy and wake-ups are slow.
  double cpu_us_per_rtt = double(bench::cpu_ns() - cpu_start) / 1000.0 / double(options.iterations);
  close(fd);

  std::sort(half_rtt_ns.begin(), half_rtt_ns.end());
  std::size_t n = half_rtt_ns.size();
  auto percentile = [&](double p) {  // nearest rank
    std::size_t rank = std::size_t(p / 100.0 * double(n) + 0.999999);
    return double(half_rtt_ns[std::clamp<std::size_t>(rank, 1, n) - 1]) / 1000.0;
  };
  double sum = 0;
  for (auto v : half_rtt_ns) sum += double(v);
  double mean = sum / double(n) / 1000.0;
  double median = percentile(50), p99 = percentile(99);
  // The lower tail is the path's own cost: on a host whose speed drifts the
  // median moves with the host, the 10th percentile much less.
  double p10 = percentile(10);
  double min = double(half_rtt_ns.front()) / 1000.0, max = double(half_rtt_ns.back()) / 1000.0;

  std::printf(
      "{\"benchmark\":\"pingpong\",\"size\":%zu,\"iterations\":%ld,\"warmup\":%ld,"
      "\"half_rtt_us_median\":%.3f,\"half_rtt_us_p10\":%.3f,\"half_rtt_us_p99\":%.3f,\"half_rtt_us_mean\":%.3f,"
      "\"half_rtt_us_min\":%.3f,\"half_rtt_us_max\":%.3f,\"client_cpu_us_per_rtt\":%.3f}\n",
      options.size, options.iterations, warmup, median, p10, p99, mean, min, max, cpu_us_per_rtt);
  std::fflush(stdout);
  std::fprintf(stderr,
               "pingpong %zu B x %ld (warm-up %ld): half round trip median %.2f us, "
               "p10 %.2f us, p99 %.2f us, mean %.2f us (min %.2f, max %.2f); client CPU %.2f us per round trip\n",
               options.size, options.iterations, warmup, median, p10, p99, mean, min, max,
               cpu_us_per_rtt);
  return 0;
}

struct Program {
  using Options = ClientOptions;
  static void usage() { ::usage(); }
  static bool client_option(bench::Args& args, Options& options) {
    return ::client_option(args, options);
  }
  static int run_client(const std::string& host, const std::string& port, const Options& options) {
    return ::run_client(host, port, options);
  }
  static void serve(int listener, long connections) { ::serve(listener, connections); }
};

}  // namespace

int main(int argc, char** argv) { return bench::run_bench_main<Program>("socket_pingpong", argc, argv); }
