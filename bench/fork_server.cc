// fork_server: what a server that forks a child per connection pays (sshd,
// PostgreSQL, inetd-style daemons): the cost of the fork, the child's start
// and its exit, with one request and one answer per connection.
//
//   fork_server server [--host H] [--port P] [--port-file F] [--size S]
//   fork_server client --host H --port P [--connections N] [--size S]
//   fork_server local [--host H] [--connections N] [--size S]
//
// The server accepts, forks, and the child reads a request of S bytes
// (default 64), answers with as many, closes and _exits; the parent closes
// its copy and accepts the next (SIGCHLD ignored: children are reaped by the
// kernel). The client opens N connections one after another, each checked
// byte for byte, and prints connections per second as a JSON line on stdout.
// "local" forks the server beside the client.
#include <signal.h>
#include <sys/wait.h>

#include <vector>

#include "bench_net.h"

namespace {

using namespace bench;

[[noreturn]] void usage() {
  std::fputs(
      "usage: fork_server server [--host H] [--port P] [--port-file F] [--size S]\n"
      "       fork_server client --host H --port P [--connections N] [--size S]\n"
      "       fork_server local [--host H] [--connections N] [--size S]\n",
      stderr);
  std::exit(2);
}

// The child's whole life: one request, one answer.
[[noreturn]] void answer(int fd, std::size_t size) {
  std::vector<unsigned char> request(size);
  if (!read_full(fd, request.data(), size)) _exit(1);
  for (unsigned char& byte : request) byte = static_cast<unsigned char>(~byte);
  write_full(fd, request.data(), size);
  close(fd);
  _exit(0);
}

[[noreturn]] void serve(int listener, std::size_t size) {
  signal(SIGCHLD, SIG_IGN);
  for (;;) {
    const int fd = accept_one(listener);
    const pid_t child = fork();
    if (child < 0) die_errno("fork");
    if (child == 0) {
      close(listener);
      answer(fd, size);
    }
    close(fd);
  }
}

void run_client(const std::string& host, const std::string& port, long connections, std::size_t size) {
  std::vector<unsigned char> request(size), reply(size);
  const std::uint64_t start = now_ns();
  for (long index = 0; index < connections; ++index) {
    for (std::size_t at = 0; at < size; ++at) request[at] = static_cast<unsigned char>(index + at);
    const int fd = connect_to(host, port);
    write_full(fd, request.data(), size);
    if (!read_full(fd, reply.data(), size)) die("the server closed before answering");
    for (std::size_t at = 0; at < size; ++at)
      if (reply[at] != static_cast<unsigned char>(~request[at])) die("the answer does not match the request");
    close(fd);
  }
  const double seconds = static_cast<double>(now_ns() - start) / 1e9;
  std::printf("{\"connections\": %ld, \"size\": %zu, \"connections_per_second\": %.1f}\n", connections, size,
              static_cast<double>(connections) / seconds);
}

}  // namespace

int main(int argc, char** argv) {
  Args args(argc, argv);
  if (args.done()) usage();
  const std::string mode(args.next());
  EndpointOptions options;
  while (!args.done())
    if (!endpoint_option(args, options)) usage();
  const auto& [host, port, port_file, connections, size] = options;
  if (size == 0 || connections <= 0) usage();
  if (mode == "server") {
    int bound = 0;
    const int listener = listen_on(host, port, &bound);
    write_port_file(port_file, bound);
    serve(listener, size);
  }
  if (mode == "client") {
    run_client(host, port, connections, size);
    return 0;
  }
  if (mode == "local") {
    pid_t server = -1;
    const int bound = fork_local_server(host, &server, [size](int listener) { serve(listener, size); });
    run_client(host, std::to_string(bound), connections, size);
    kill(server, SIGTERM);
    waitpid(server, nullptr, 0);
    return 0;
  }
  usage();
}
