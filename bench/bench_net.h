// Helpers shared by the benchmark programs: argument parsing, address
// resolution (IPv4 and IPv6), full-length blocking reads and writes, and the
// "local" mode that forks a server next to the client.
//
// Deliberately plain POSIX: the benchmarks must run unchanged with and
// without libqpsock.so preloaded, so they use nothing the interposer would not
// see in an ordinary program.
#pragma once

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>

namespace bench {

// Exit status for "this address family is not available here" (ctest's
// SKIP_RETURN_CODE), e.g. IPv6 disabled in a container.
inline constexpr int kExitUnsupported = 77;

[[noreturn]] inline void die(const char* what) {
  std::fprintf(stderr, "%s\n", what);
  std::exit(1);
}

// `may_be_unsupported`: for creating or binding the listening socket, where
// EAFNOSUPPORT or EADDRNOTAVAIL mean that the address family is missing.
[[noreturn]] inline void die_errno(const char* what, bool may_be_unsupported = false) {
  int saved = errno;
  std::fprintf(stderr, "%s: %s\n", what, std::strerror(saved));
  bool unsupported = saved == EAFNOSUPPORT || saved == EADDRNOTAVAIL;
  std::exit(may_be_unsupported && unsupported ? kExitUnsupported : 1);
}

inline std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000u + std::uint64_t(ts.tv_nsec);
}

// CPU time (user + system) this process has used so far.
inline std::uint64_t cpu_ns() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto ns = [](const timeval& tv) {
    return std::uint64_t(tv.tv_sec) * 1'000'000'000u + std::uint64_t(tv.tv_usec) * 1000u;
  };
  return ns(usage.ru_utime) + ns(usage.ru_stime);
}

// A size with an optional binary suffix: 64, 4K, 1M, 2G.
inline std::uint64_t parse_size(std::string_view text) {
  std::uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) die(("bad number: " + std::string(text)).c_str());
  std::string_view suffix(end, std::size_t(text.data() + text.size() - end));
  if (suffix == "K" || suffix == "k" || suffix == "KiB") value <<= 10;
  else if (suffix == "M" || suffix == "MiB") value <<= 20;
  else if (suffix == "G" || suffix == "GiB") value <<= 30;
  else if (!suffix.empty()) die(("bad size suffix: " + std::string(text)).c_str());
  return value;
}

inline double parse_double(std::string_view text) {
  char* end = nullptr;
  std::string copy(text);
  double value = std::strtod(copy.c_str(), &end);
  if (end == copy.c_str() || *end != '\0') die(("bad number: " + copy).c_str());
  return value;
}

// Walks argv: positional arguments and "--name value" / "--name=value" options.
class Args {
 public:
  Args(int argc, char** argv) : argc_(argc), argv_(argv) {}
  bool done() const { return index_ >= argc_; }
  std::string_view peek() const { return argv_[index_]; }
  std::string_view next() { return argv_[index_++]; }
  // True (and the value taken) if the current argument is option `name`.
  bool option(std::string_view name, std::string_view& value) {
    std::string_view current = peek();
    if (current == name) {
      if (index_ + 1 >= argc_) die(("missing value for " + std::string(name)).c_str());
      value = argv_[index_ + 1];
      index_ += 2;
      return true;
    }
    if (current.size() > name.size() && current.substr(0, name.size()) == name &&
        current[name.size()] == '=') {
      value = current.substr(name.size() + 1);
      ++index_;
      return true;
    }
    return false;
  }
  bool flag(std::string_view name) {
    if (peek() != name) return false;
    ++index_;
    return true;
  }

 private:
  int argc_;
  char** argv_;
  int index_ = 1;
};

// The options of a program run as "server" and "client" on one command line
// (fork_server, many_connections): where, how many connections, how large.
struct EndpointOptions {
  std::string host = "127.0.0.1";
  std::string port = "0";
  std::string port_file;
  long connections = 1000;
  std::size_t size = 64;
};

// True (and the value taken) if the current argument is one of those.
inline bool endpoint_option(Args& args, EndpointOptions& options) {
  std::string_view value;
  if (args.option("--host", value)) options.host = value;
  else if (args.option("--port", value)) options.port = value;
  else if (args.option("--port-file", value)) options.port_file = value;
  else if (args.option("--connections", value)) options.connections = static_cast<long>(parse_size(value));
  else if (args.option("--size", value)) options.size = static_cast<std::size_t>(parse_size(value));
  else return false;
  return true;
}

// Blocking loops: a short read or write is continued, EINTR retried.
// read_full returns false on a clean EOF before the first byte.
inline bool read_full(int fd, void* buffer, std::size_t length) {
  auto* bytes = static_cast<char*>(buffer);
  std::size_t done = 0;
  while (done < length) {
    ssize_t n = ::read(fd, bytes + done, length - done);
    if (n > 0) {
      done += std::size_t(n);
    } else if (n == 0) {
      if (done == 0) return false;
      die("peer closed the connection in the middle of a message");
    } else if (errno != EINTR) {
      die_errno("read");
    }
  }
  return true;
}

inline void write_full(int fd, const void* buffer, std::size_t length) {
  const auto* bytes = static_cast<const char*>(buffer);
  std::size_t done = 0;
  while (done < length) {
    ssize_t n = ::write(fd, bytes + done, length - done);
    if (n >= 0) done += std::size_t(n);
    else if (errno != EINTR) die_errno("write");
  }
}

inline void set_nodelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) die_errno("TCP_NODELAY");
}

inline addrinfo* resolve(const char* host, const char* port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  int error = getaddrinfo(host, port, &hints, &result);
  if (error != 0) {
    std::fprintf(stderr, "cannot resolve %s port %s: %s\n", host ? host : "(any)", port,
                 gai_strerror(error));
    std::exit(error == EAI_FAMILY || error == EAI_ADDRFAMILY ? kExitUnsupported : 1);
  }
  return result;
}

// A listening socket on host:port (host empty: every address, IPv6 and IPv4
// when the kernel allows dual-stack). Port 0 picks a free port; the one chosen
// is returned in *bound_port.
inline int listen_on(const std::string& host, const std::string& port, int* bound_port) {
  addrinfo* addresses = resolve(host.empty() ? nullptr : host.c_str(), port.c_str(), true);
  // For the wildcard address prefer IPv6 (dual-stack) when getaddrinfo offers it.
  addrinfo* chosen = addresses;
  if (host.empty())
    for (addrinfo* a = addresses; a; a = a->ai_next)
      if (a->ai_family == AF_INET6) { chosen = a; break; }
  int fd = socket(chosen->ai_family, chosen->ai_socktype | SOCK_CLOEXEC, chosen->ai_protocol);
  if (fd < 0) die_errno("socket", true);
  int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (chosen->ai_family == AF_INET6 && host.empty())
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (bind(fd, chosen->ai_addr, chosen->ai_addrlen) != 0) die_errno("bind", true);
  freeaddrinfo(addresses);
  if (listen(fd, 16) != 0) die_errno("listen");
  sockaddr_storage local{};
  socklen_t length = sizeof local;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) die_errno("getsockname");
  *bound_port = local.ss_family == AF_INET6
                    ? ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port)
                    : ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  return fd;
}

// The client's source address (--bind): between two local addresses, as in
// the Soft-RoCE setup, the kernel would otherwise pick the destination's own.
inline std::string client_source_address;

inline int connect_to(const std::string& host, const std::string& port) {
  addrinfo* addresses = resolve(host.c_str(), port.c_str(), false);
  addrinfo* source = client_source_address.empty()
                         ? nullptr
                         : resolve(client_source_address.c_str(), "0", false);
  int fd = -1;
  int last_errno = 0;
  for (addrinfo* a = addresses; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) { last_errno = errno; continue; }
    if ((source != nullptr && bind(fd, source->ai_addr, source->ai_addrlen) != 0) ||
        connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      last_errno = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(addresses);
  if (source != nullptr) freeaddrinfo(source);
  if (fd < 0) {
    errno = last_errno;
    die_errno(("connect to " + host + " port " + port).c_str());
  }
  set_nodelay(fd);
  return fd;
}

inline int accept_one(int listener) {
  for (;;) {
    int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      set_nodelay(fd);
      return fd;
    }
    if (errno != EINTR) die_errno("accept");
  }
}

// Writes the bound port to `path` (write to a temporary name, then rename, so
// a reader polling for the file never sees it half written).
inline void write_port_file(const std::string& path, int port) {
  if (path.empty()) return;
  std::string temporary = path + ".tmp";
  FILE* file = std::fopen(temporary.c_str(), "w");
  if (!file) die_errno(("open " + temporary).c_str());
  std::fprintf(file, "%d\n", port);
  if (std::fclose(file) != 0 || std::rename(temporary.c_str(), path.c_str()) != 0)
    die_errno(("write " + path).c_str());
}

// "local" mode: binds a listener on host (port chosen by the kernel), forks a
// child that runs `serve(listener)` and exits, and returns the port to the
// parent, which then runs the client. Two processes, so a preloaded library is
// active at both ends, as with separate "server" and "client" invocations.
template <typename Serve>
int fork_local_server(const std::string& host, pid_t* child, Serve serve) {
  int port = 0;
  int listener = listen_on(host, "0", &port);
  pid_t pid = fork();
  if (pid < 0) die_errno("fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // never outlive a client that died early
    serve(listener);
    std::fflush(nullptr);
    _exit(0);
  }
  close(listener);
  *child = pid;
  return port;
}

inline void wait_local_server(pid_t child) {
  int status = 0;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR) die_errno("waitpid");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("the local server failed");
}

// The command line shared by the client/server benchmarks:
//   NAME server [PORT] [--host ADDR] [--port-file FILE] [--connections N]
//   NAME client HOST PORT [--bind SOURCE_ADDR] [client options]
//   NAME local [--host ADDR] [client options]
// `Program` supplies: Options (client options), client_option(args, options),
// run_client(host, port, options), serve(listener, connections) and usage().
template <typename Program>
int run_bench_main(const char* name, int argc, char** argv) {
  Args args(argc, argv);
  if (args.done()) Program::usage();
  std::string_view mode = args.next();
  std::string_view value;

  if (mode == "server") {
    std::string host, port = "0", port_file;
    long connections = 1;
    bool have_port = false;
    while (!args.done()) {
      if (args.option("--host", value)) host = value;
      else if (args.option("--port", value)) port = value, have_port = true;
      else if (args.option("--port-file", value)) port_file = value;
      else if (args.option("--connections", value)) connections = long(parse_size(value));
      else if (!have_port && args.peek().substr(0, 1) != "-") port = args.next(), have_port = true;
      else Program::usage();
    }
    int bound = 0;
    int listener = listen_on(host, port, &bound);
    write_port_file(port_file, bound);
    std::fprintf(stderr, "%s: listening on port %d\n", name, bound);
    Program::serve(listener, connections);
    return 0;
  }

  if (mode == "client") {
    std::string host, port;
    typename Program::Options options;
    while (!args.done()) {
      if (Program::client_option(args, options)) continue;
      if (args.option("--host", value)) host = value;
      else if (args.option("--port", value)) port = value;
      else if (args.option("--bind", value)) client_source_address = value;
      else if (args.peek().substr(0, 1) == "-") Program::usage();
      else if (host.empty()) host = args.next();
      else if (port.empty()) port = args.next();
      else Program::usage();
    }
    if (host.empty() || port.empty()) Program::usage();
    return Program::run_client(host, port, options);
  }

  if (mode == "local") {
    std::string host = "127.0.0.1";
    typename Program::Options options;
    while (!args.done()) {
      if (Program::client_option(args, options)) continue;
      if (args.option("--host", value)) host = value;
      else Program::usage();
    }
    pid_t child = 0;
    int port = fork_local_server(host, &child, [](int listener) { Program::serve(listener, 1); });
    int status = Program::run_client(host, std::to_string(port), options);
    wait_local_server(child);
    return status;
  }

  Program::usage();
  return 2;
}

}  // namespace bench
