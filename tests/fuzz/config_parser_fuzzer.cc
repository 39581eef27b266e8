// libFuzzer target: qpsock.conf text straight from the fuzzer, through the
// parser, the environment overrides and decide(). Besides memory errors and
// undefined behaviour (the sanitizers' job), it checks what the parser
// promises whatever the input: every diagnostic is attributed, every accepted
// tunable is in range, and every decision has a reason.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "config/config_parser.h"
#include "config/environment_overrides.h"

namespace {

using namespace qpsock::config;

void require(bool condition) {
  if (!condition) std::abort();
}

sockaddr_storage socket_address(const char* address, uint16_t port) {
  sockaddr_storage storage{};
  if (std::strchr(address, ':') != nullptr) {
    auto* ipv6 = reinterpret_cast<sockaddr_in6*>(&storage);
    ipv6->sin6_family = AF_INET6;
    ipv6->sin6_port = htons(port);
    inet_pton(AF_INET6, address, &ipv6->sin6_addr);
  } else {
    auto* ipv4 = reinterpret_cast<sockaddr_in*>(&storage);
    ipv4->sin_family = AF_INET;
    ipv4->sin_port = htons(port);
    inet_pton(AF_INET, address, &ipv4->sin_addr);
  }
  return storage;
}

void check_tunables(const Tunables& tunables) {
  require(!tunables.inline_size || *tunables.inline_size <= limits::kLargestInlineSize);
  require(tunables.rendezvous_threshold >= limits::kSmallestRendezvousThreshold &&
          tunables.rendezvous_threshold <= limits::kLargestRendezvousThreshold);
  require(tunables.ring_size >= limits::kSmallestRingSize &&
          tunables.ring_size <= limits::kLargestRingSize);
  require((tunables.ring_size & (tunables.ring_size - 1)) == 0);
  require(tunables.eager_chunk >= limits::kSmallestEagerChunk &&
          tunables.eager_chunk <= tunables.ring_size / 2);
  require(tunables.spin_time.count() >= 0 && tunables.spin_time <= limits::kLargestSpinTime);
  require(tunables.upgrade_timeout >= limits::kShortestUpgradeTimeout &&
          tunables.upgrade_timeout <= limits::kLongestUpgradeTimeout);
}

// Every (local, peer) pair of a few interesting endpoints, built once.
struct EndpointPairs {
  std::vector<sockaddr_storage> locals;
  std::vector<sockaddr_storage> peers;

  EndpointPairs() {
    static const char* const kAddresses[] = {"10.77.0.5", "192.0.2.1", "fd77::1",
                                             "::ffff:10.77.0.5", "::1", "0.0.0.0"};
    static const uint16_t kPorts[] = {1, 22, 5000, 65535};
    for (const char* local : kAddresses) {
      for (const char* peer : kAddresses) {
        for (uint16_t port : kPorts) {
          locals.push_back(socket_address(local, port));
          peers.push_back(socket_address(peer, static_cast<uint16_t>(port ^ 1)));
        }
      }
    }
  }
};

void check_decisions(const Config& config) {
  static const EndpointPairs pairs;
  for (size_t index = 0; index < pairs.locals.size(); ++index) {
    for (Role role : {Role::client, Role::server}) {
      Decision decision =
          config.decide(reinterpret_cast<const sockaddr*>(&pairs.locals[index]),
                        reinterpret_cast<const sockaddr*>(&pairs.peers[index]), role);
      require(!decision.reason.empty());
    }
  }
}

// The input's lines double as values for the QPSOCK_* overrides.
ParseResult parse_with_environment(std::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size() && lines.size() < 8) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  EnvironmentLookup lookup = [&lines](const char* name) -> const char* {
    static const char* const kNames[] = {
        "QPSOCK_INLINE_SIZE", "QPSOCK_RENDEZVOUS_THRESHOLD", "QPSOCK_RING_SIZE",
        "QPSOCK_EAGER_CHUNK", "QPSOCK_SPIN_TIME", "QPSOCK_UPGRADE_TIMEOUT",
        "QPSOCK_SAME_HOST", "QPSOCK_OFFLOAD"};
    for (size_t index = 0; index < lines.size(); ++index) {
      if (std::strcmp(name, kNames[index]) == 0) return lines[index].c_str();
    }
    return nullptr;
  };
  ConfigBuilder builder;
  builder.use_file("fuzz.conf");
  parse_config_lines(text, "fuzz.conf", builder);
  apply_environment_overrides(lookup, builder);
  return std::move(builder).finish();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);

  ParseResult result = parse_config_text(text, "fuzz.conf");
  for (const std::string& diagnostic : result.diagnostics) {
    require(diagnostic.starts_with("fuzz.conf"));
  }
  for (const Rule& rule : result.config.rules()) require(rule.origin.starts_with("fuzz.conf:"));
  check_tunables(result.config.tunables());
  check_decisions(result.config);

  ParseResult with_environment = parse_with_environment(text);
  check_tunables(with_environment.config.tunables());
  check_decisions(with_environment.config);
  return 0;
}
