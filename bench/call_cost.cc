// call_cost: what an interposer adds to each socket call, measured inside one
// process on a loopback TCP connection it makes to itself.
//
//   call_cost [--host 127.0.0.1] [--batches 200] [--batch 5000]
//
// Every call is made two ways, batch after batch in turn: the ordinary way
// (through the PLT, so through a preloaded library if there is one) and
// directly into glibc (the function dlsym finds in libc.so.6 itself). Both
// ways do the same system call, so the difference is the interposer's own
// work, measured without the wake-ups that dominate a ping-pong between two
// processes, and with drift cancelled because neighbouring batches share the
// machine's state. Without a preload the two ways are the same code and the
// ratio is 1 (a check of the method). The connection is kept on kernel TCP
// (QPSOCK_OFFLOAD=0), since the direct calls would not see an offloaded one.
//
// Calls (each in BATCHES batches of BATCH calls per way):
//   recv_eagain    recv(MSG_DONTWAIT) on an empty socket: the data path's
//                  entry and exit, with as little kernel work as there is
//   getsockopt     getsockopt(SOL_SOCKET, SO_ERROR)
//   write_read_64  write 64 bytes on one end, read them on the other
// Reported per call: the fastest batch through the PLT (NAME_ns_min) and
// directly (NAME_direct_ns_min), in nanoseconds per call, and the median over
// neighbouring batch pairs of their time ratio (NAME_ratio: 1.02 = the
// interposer adds 2%). A JSON line on stdout, a human line per call on stderr.
#include <dlfcn.h>

#include <algorithm>
#include <vector>

#include "bench_net.h"

namespace {

struct Result {
  const char* name;
  double min_ns, direct_min_ns, ratio;
};

template <typename Call, typename Direct>
Result measure(const char* name, long batches, long batch, Call call, Direct direct) {
  auto time_batch = [batch](auto& function) {
    std::uint64_t start = bench::now_ns();
    for (long i = 0; i < batch; ++i) function();
    return double(bench::now_ns() - start) / double(batch);
  };
  time_batch(call);  // warm-up
  time_batch(direct);
  std::vector<double> plt, straight, ratios;
  for (long b = 0; b < batches; ++b) {
    // Alternate which way goes first, so that neither always follows the other.
    double a = 0, d = 0;
    if (b % 2) {
      a = time_batch(call);
      d = time_batch(direct);
    } else {
      d = time_batch(direct);
      a = time_batch(call);
    }
    plt.push_back(a);
    straight.push_back(d);
    ratios.push_back(a / d);
  }
  std::sort(ratios.begin(), ratios.end());
  return {name, *std::min_element(plt.begin(), plt.end()),
          *std::min_element(straight.begin(), straight.end()), ratios[ratios.size() / 2]};
}

template <typename Function>
Function* libc_function(const char* name) {
  static void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (!libc) bench::die("call_cost: cannot find libc.so.6");
  void* function = dlsym(libc, name);
  if (!function) bench::die("call_cost: a libc function is missing");
  return reinterpret_cast<Function*>(function);
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  std::string host = "127.0.0.1";
  long batches = 200, batch = 5000;
  std::string_view value;
  while (!args.done()) {
    if (args.option("--host", value)) host = value;
    else if (args.option("--batches", value)) batches = long(bench::parse_size(value));
    else if (args.option("--batch", value)) batch = long(bench::parse_size(value));
    else {
      std::fputs("usage: call_cost [--host ADDR] [--batches N] [--batch N]\n", stderr);
      return 2;
    }
  }
  if (batches <= 0 || batch <= 0) bench::die("--batches and --batch must be > 0");
  // The direct calls bypass qpsock, so the connection must stay on kernel TCP
  // for both ways to reach the same socket: this measures what being loaded
  // costs a connection qpsock does not accelerate. (qpsock reads its
  // configuration at first use, after this.)
  setenv("QPSOCK_OFFLOAD", "0", 1);

  auto* libc_recv = libc_function<decltype(recv)>("recv");
  auto* libc_getsockopt = libc_function<decltype(getsockopt)>("getsockopt");
  auto* libc_write = libc_function<decltype(write)>("write");
  auto* libc_read = libc_function<decltype(read)>("read");

  int port = 0;
  int listener = bench::listen_on(host, "0", &port);
  int client = bench::connect_to(host, std::to_string(port));
  int server = bench::accept_one(listener);
  close(listener);

  char buffer[64] = {};
  auto expect_eagain = [](ssize_t n) {
    if (n != -1 || (errno != EAGAIN && errno != EWOULDBLOCK))
      bench::die("recv on an empty socket did not fail with EAGAIN");
  };
  auto expect_zero = [](int status) {
    if (status != 0) bench::die_errno("getsockopt");
  };
  // 64 bytes on loopback are written whole and, once written, readable whole.
  auto expect_64 = [](ssize_t n) {
    if (n != 64) bench::die("write or read of 64 bytes was short");
  };
  int error = 0;
  socklen_t length = sizeof error;

  std::vector<Result> results;
  results.push_back(measure(
      "recv_eagain", batches, batch,
      [&] { expect_eagain(recv(client, buffer, sizeof buffer, MSG_DONTWAIT)); },
      [&] { expect_eagain(libc_recv(client, buffer, sizeof buffer, MSG_DONTWAIT)); }));
  results.push_back(measure(
      "getsockopt", batches, batch,
      [&] { expect_zero(getsockopt(client, SOL_SOCKET, SO_ERROR, &error, &length)); },
      [&] { expect_zero(libc_getsockopt(client, SOL_SOCKET, SO_ERROR, &error, &length)); }));
  results.push_back(measure(
      "write_read_64", batches, batch,
      [&] {
        expect_64(write(client, buffer, sizeof buffer));
        expect_64(read(server, buffer, sizeof buffer));
      },
      [&] {
        expect_64(libc_write(client, buffer, sizeof buffer));
        expect_64(libc_read(server, buffer, sizeof buffer));
      }));
  close(client);
  close(server);

  std::string json = "{\"benchmark\":\"call_cost\",\"batches\":" + std::to_string(batches) +
                     ",\"batch\":" + std::to_string(batch);
  for (const auto& r : results) {
    char fields[200];
    std::snprintf(fields, sizeof fields,
                  ",\"%s_ns_min\":%.1f,\"%s_direct_ns_min\":%.1f,\"%s_ratio\":%.4f", r.name,
                  r.min_ns, r.name, r.direct_min_ns, r.name, r.ratio);
    json += fields;
    std::fprintf(stderr,
                 "call_cost %-14s %8.1f ns per call (fastest batch), %8.1f ns directly into "
                 "glibc; ratio %.3f\n",
                 r.name, r.min_ns, r.direct_min_ns, r.ratio);
  }
  std::printf("%s}\n", json.c_str());
  return 0;
}
