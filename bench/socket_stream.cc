// socket_stream: one-way TCP streaming bandwidth (blocking sockets).
//
//   socket_stream server [PORT] [--host ADDR] [--port-file FILE] [--connections N]
//   socket_stream client HOST PORT [--write-size 1M] [--seconds 5 | --bytes B]
//                                  [--verify sample|full|off] [--warmup-seconds W]
//   socket_stream local [--host 127.0.0.1] [client options]
//
// The client writes WRITE-SIZE-byte writes for SECONDS (or until B bytes),
// then shuts down its sending side; the server reads and counts until EOF and
// answers with the byte count and the number of pattern mismatches it saw.
// Bandwidth = bytes / (first write .. server's answer), so the data still in
// socket buffers when the client stops writing is counted as in flight, not
// as delivered. With --warmup-seconds, the client first writes for W seconds
// unmeasured (an interposer that upgrades the connection in the background,
// as qpsock does, carries those first bytes on TCP) and the figures cover
// what follows: the bytes written after the warm-up over the time from its
// end to the server's answer. Reported as a JSON line on stdout and a human line on stderr;
// MB/s is 10^6 bytes per second. Each end's CPU time (user + system) per GB
// is reported too.
//
// The pattern: the 64-bit little-endian word at every stream offset that is a
// multiple of the stride holds that offset. "sample" (default) uses a 4 KiB
// stride, which costs a few hundred stores and loads per MiB and still catches
// lost, duplicated or reordered pages; "full" checks every word (costs memory
// bandwidth on both ends); "off" checks nothing.
#include <arpa/inet.h>
#include <endian.h>

#include <algorithm>
#include <vector>

#include "bench_net.h"

namespace {

constexpr std::uint32_t kMagic = 0x51505354;  // "QPST"

struct Header {
  std::uint32_t magic;
  std::uint32_t write_size;
  std::uint32_t stride;  // 0: no pattern
};

struct Reply {
  std::uint64_t bytes;
  std::uint64_t mismatches;
  std::uint64_t receive_ns;  // first byte to EOF, as the server saw it
  std::uint64_t cpu_ns;      // the server's CPU time over the connection
};

void usage() {
  std::fputs(
      "usage: socket_stream server [PORT] [--host ADDR] [--port-file FILE] [--connections N]\n"
      "       socket_stream client HOST PORT [--write-size BYTES] [--seconds S | --bytes B]\n"
      "                            [--verify sample|full|off] [--warmup-seconds W]\n"
      "       socket_stream local [--host ADDR] [client options]\n",
      stderr);
  std::exit(2);
}

// Writes the pattern words overlapping stream range [offset, offset+length)
// into buffer (which holds that range), partial words included.
void fill_pattern(char* buffer, std::uint64_t offset, std::size_t length, std::uint64_t stride) {
  std::uint64_t end = offset + length;
  std::uint64_t first = offset >= 7 ? offset - 7 : 0;
  for (std::uint64_t k = (first + stride - 1) / stride * stride; k < end; k += stride) {
    std::uint64_t word = htole64(k);
    std::uint64_t from = std::max(k, offset), to = std::min(k + 8, end);
    std::memcpy(buffer + (from - offset), reinterpret_cast<char*>(&word) + (from - k), to - from);
  }
}

// Counts the pattern words wholly inside [offset, offset+length) that are wrong.
std::uint64_t check_pattern(const char* buffer, std::uint64_t offset, std::size_t length,
                            std::uint64_t stride) {
  std::uint64_t mismatches = 0;
  std::uint64_t end = offset + length;
  for (std::uint64_t k = (offset + stride - 1) / stride * stride; k + 8 <= end; k += stride) {
    std::uint64_t word = 0;
    std::memcpy(&word, buffer + (k - offset), 8);
    mismatches += le64toh(word) != k;
  }
  return mismatches;
}

void serve_connection(int fd) {
  Header header{};
  if (!bench::read_full(fd, &header, sizeof header)) return;
  if (ntohl(header.magic) != kMagic) bench::die("server: not a socket_stream client");
  std::size_t buffer_size = std::clamp<std::size_t>(ntohl(header.write_size), 4096, 64u << 20);
  std::uint64_t stride = ntohl(header.stride);
  std::vector<char> buffer(buffer_size);
  Reply reply{};
  std::uint64_t start = 0, cpu_start = bench::cpu_ns();
  for (;;) {
    ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      bench::die_errno("server: read");
    }
    if (reply.bytes == 0) start = bench::now_ns();
    if (stride) reply.mismatches += check_pattern(buffer.data(), reply.bytes, std::size_t(n), stride);
    reply.bytes += std::uint64_t(n);
  }
  reply.receive_ns = reply.bytes ? bench::now_ns() - start : 0;
  reply.cpu_ns = bench::cpu_ns() - cpu_start;
  if (reply.mismatches)
    std::fprintf(stderr, "socket_stream server: %llu pattern mismatches\n",
                 static_cast<unsigned long long>(reply.mismatches));
  Reply wire{htobe64(reply.bytes), htobe64(reply.mismatches), htobe64(reply.receive_ns),
             htobe64(reply.cpu_ns)};
  bench::write_full(fd, &wire, sizeof wire);
  close(fd);
}

void serve(int listener, long connections) {
  for (long served = 0; connections == 0 || served < connections; ++served)
    serve_connection(bench::accept_one(listener));
  close(listener);
}

struct ClientOptions {
  std::size_t write_size = 1u << 20;
  double seconds = 5;
  std::uint64_t bytes = 0;  // 0: run for `seconds`
  std::string verify = "sample";
  double warmup_seconds = 0;
};

bool client_option(bench::Args& args, ClientOptions& options) {
  std::string_view value;
  if (args.option("--write-size", value)) options.write_size = bench::parse_size(value);
  else if (args.option("--seconds", value)) options.seconds = bench::parse_double(value);
  else if (args.option("--bytes", value)) options.bytes = bench::parse_size(value);
  else if (args.option("--verify", value)) options.verify = value;
  else if (args.option("--warmup-seconds", value)) options.warmup_seconds = bench::parse_double(value);
  else return false;
  return true;
}

int run_client(const std::string& host, const std::string& port, const ClientOptions& options) {
  if (options.write_size == 0 || options.write_size > (64u << 20))
    bench::die("--write-size must be 1..64M");
  if (options.bytes == 0 && !(options.seconds > 0)) bench::die("--seconds must be > 0");
  std::uint64_t stride = options.verify == "sample" ? 4096
                         : options.verify == "full" ? 8
                         : options.verify == "off"  ? 0
                                                    : (bench::die("--verify: sample, full or off"), 0);
  int fd = bench::connect_to(host, port);
  Header header{htonl(kMagic), htonl(std::uint32_t(options.write_size)), htonl(std::uint32_t(stride))};
  bench::write_full(fd, &header, sizeof header);

  std::vector<char> buffer(options.write_size, 'q');
  std::uint64_t sent = 0;
  auto write_next = [&](std::size_t length) {
    if (stride) fill_pattern(buffer.data(), sent, length, stride);
    bench::write_full(fd, buffer.data(), length);
    sent += length;
  };
  const std::uint64_t warmup_end = bench::now_ns() + std::uint64_t(options.warmup_seconds * 1e9);
  while (bench::now_ns() < warmup_end) write_next(options.write_size);
  const std::uint64_t warmup_bytes = sent;
  std::uint64_t cpu_start = bench::cpu_ns();
  std::uint64_t start = bench::now_ns();
  std::uint64_t deadline = start + std::uint64_t(options.seconds * 1e9);
  for (;;) {
    std::size_t length = options.write_size;
    if (options.bytes) {
      if (sent - warmup_bytes >= options.bytes) break;
      length = std::size_t(std::min<std::uint64_t>(length, options.bytes - (sent - warmup_bytes)));
    } else if (bench::now_ns() >= deadline) {
      break;
    }
    write_next(length);
  }
  if (shutdown(fd, SHUT_WR) != 0) bench::die_errno("shutdown");
  Reply reply{};
  if (!bench::read_full(fd, &reply, sizeof reply)) bench::die("server closed without answering");
  std::uint64_t elapsed = bench::now_ns() - start;
  std::uint64_t cpu = bench::cpu_ns() - cpu_start;
  close(fd);
  reply.bytes = be64toh(reply.bytes);
  reply.mismatches = be64toh(reply.mismatches);
  reply.receive_ns = be64toh(reply.receive_ns);
  reply.cpu_ns = be64toh(reply.cpu_ns);
  if (reply.bytes != sent) {
    std::fprintf(stderr, "socket_stream: sent %llu bytes but the server received %llu\n",
                 static_cast<unsigned long long>(sent), static_cast<unsigned long long>(reply.bytes));
    return 1;
  }
  if (reply.mismatches) {
    std::fprintf(stderr, "socket_stream: the server saw %llu pattern mismatches\n",
                 static_cast<unsigned long long>(reply.mismatches));
    return 1;
  }

  const std::uint64_t measured = sent - warmup_bytes;
  double seconds = double(elapsed) / 1e9;
  double mb_per_s = double(measured) / 1e6 / seconds;
  double server_mb_per_s =
      reply.receive_ns ? double(reply.bytes) / 1e6 / (double(reply.receive_ns) / 1e9) : 0;
  // CPU time per GB moved at each end: the cost of each read and write call
  // (ours and the kernel's copy), less sensitive to a busy machine than MB/s.
  // The server's figures span the whole connection, warm-up included.
  double gigabytes = double(measured) / 1e9;
  double client_cpu_ms_per_gb = gigabytes > 0 ? double(cpu) / 1e6 / gigabytes : 0;
  double server_cpu_ms_per_gb =
      reply.bytes > 0 ? double(reply.cpu_ns) / 1e6 / (double(reply.bytes) / 1e9) : 0;
  std::printf(
      "{\"benchmark\":\"stream\",\"write_size\":%zu,\"verify\":\"%s\",\"bytes\":%llu,"
      "\"warmup_bytes\":%llu,\"seconds\":%.6f,\"mb_per_s\":%.1f,\"gbit_per_s\":%.3f,\"server_mb_per_s\":%.1f,"
      "\"client_cpu_ms_per_gb\":%.1f,\"server_cpu_ms_per_gb\":%.1f}\n",
      options.write_size, options.verify.c_str(), static_cast<unsigned long long>(measured),
      static_cast<unsigned long long>(warmup_bytes), seconds, mb_per_s, mb_per_s * 8 / 1000,
      server_mb_per_s, client_cpu_ms_per_gb, server_cpu_ms_per_gb);
  std::fflush(stdout);
  std::fprintf(stderr,
               "stream %zu B writes, %.1f MB in %.3f s: %.1f MB/s = %.2f Gbit/s (verify %s); "
               "CPU per GB: client %.0f ms, server %.0f ms\n",
               options.write_size, double(measured) / 1e6, seconds, mb_per_s, mb_per_s * 8 / 1000,
               options.verify.c_str(), client_cpu_ms_per_gb, server_cpu_ms_per_gb);
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

int main(int argc, char** argv) { return bench::run_bench_main<Program>("socket_stream", argc, argv); }
