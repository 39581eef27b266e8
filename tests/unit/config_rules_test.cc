// The rule half of qpsock.conf: syntax, error messages and decide().
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/un.h>

#include <cstring>

#include "config/config_parser.h"

namespace qpsock::config {
namespace {

sockaddr_storage socket_address(const char* address, uint16_t port) {
  sockaddr_storage storage{};
  if (std::strchr(address, ':') != nullptr) {
    auto* ipv6 = reinterpret_cast<sockaddr_in6*>(&storage);
    ipv6->sin6_family = AF_INET6;
    ipv6->sin6_port = htons(port);
    EXPECT_EQ(inet_pton(AF_INET6, address, &ipv6->sin6_addr), 1) << address;
  } else {
    auto* ipv4 = reinterpret_cast<sockaddr_in*>(&storage);
    ipv4->sin_family = AF_INET;
    ipv4->sin_port = htons(port);
    EXPECT_EQ(inet_pton(AF_INET, address, &ipv4->sin_addr), 1) << address;
  }
  return storage;
}

// A connection as "LOCAL:port -> PEER:port" seen from `role`.
struct Connection {
  const char* local;
  uint16_t local_port;
  const char* peer;
  uint16_t peer_port;
  Role role;
};

Decision decide(const Config& config, const Connection& connection) {
  sockaddr_storage local = socket_address(connection.local, connection.local_port);
  sockaddr_storage peer = socket_address(connection.peer, connection.peer_port);
  return config.decide(reinterpret_cast<sockaddr*>(&local), reinterpret_cast<sockaddr*>(&peer),
                       connection.role);
}

// A client connecting from 10.0.0.1 to peer:port.
Decision decide_client(const Config& config, const char* peer, uint16_t port) {
  bool ipv6 = std::strchr(peer, ':') != nullptr;
  return decide(config, {ipv6 ? "fd00::1" : "10.0.0.1", 40000, peer, port, Role::client});
}

// A server listening on local:port that accepted peer.
Decision decide_server(const Config& config, const char* local, uint16_t port, const char* peer) {
  return decide(config, {local, port, peer, 40000, Role::server});
}

ParseResult parse(std::string_view text) { return parse_config_text(text, "test.conf"); }

// The single diagnostic that `text` produces.
std::string only_diagnostic(std::string_view text) {
  ParseResult result = parse(text);
  EXPECT_EQ(result.diagnostics.size(), 1u) << text;
  return result.diagnostics.empty() ? "" : result.diagnostics.front();
}

constexpr std::string_view kExample =
    "# comment; blank lines ignored; inline comments after '#' allowed\n"
    "# rule:  ACTION ROLE PEER [PORTS [LOCAL]]\n"
    "offload  both    10.77.0.0/24     *\n"
    "kernel   client  any              22\n"
    "offload  server  fd77::/64        5000-5999,7000   fd77::/64\n"
    "# tunable:  NAME = VALUE\n"
    "inline_size = 128\n"
    "rendezvous_threshold = 64K\n";

TEST(ConfigRules, BuiltInDefaultOffloadsEverything) {
  Config config;
  Decision decision = decide_client(config, "192.0.2.1", 22);
  EXPECT_EQ(decision.action, Action::offload);
  EXPECT_EQ(decision.reason, "built-in default");
  EXPECT_EQ(decide_server(config, "fd77::1", 80, "fd99::2").action, Action::offload);
  EXPECT_EQ(config.source(), "built-in default");
  EXPECT_TRUE(config.rules().empty());
}

TEST(ConfigRules, TheDocumentedExample) {
  ParseResult result = parse(kExample);
  EXPECT_TRUE(result.diagnostics.empty());
  const Config& config = result.config;
  ASSERT_EQ(config.rules().size(), 3u);
  EXPECT_EQ(config.source(), "test.conf");

  Decision in_subnet = decide_client(config, "10.77.0.5", 22);
  EXPECT_EQ(in_subnet.action, Action::offload);
  EXPECT_EQ(in_subnet.reason, "test.conf:3");

  Decision ssh = decide_client(config, "192.0.2.1", 22);
  EXPECT_EQ(ssh.action, Action::kernel);
  EXPECT_EQ(ssh.reason, "test.conf:4");

  Decision service = decide_server(config, "fd77::1", 5500, "fd77::2");
  EXPECT_EQ(service.action, Action::offload);
  EXPECT_EQ(service.reason, "test.conf:5");

  Decision other_port = decide_server(config, "fd77::1", 6000, "fd77::2");
  EXPECT_EQ(other_port.action, Action::kernel);
  EXPECT_EQ(other_port.reason, "no rule matched");

  EXPECT_EQ(config.tunables().inline_size, 128u);
  EXPECT_EQ(config.tunables().rendezvous_threshold, 65536u);
}

TEST(ConfigRules, FirstMatchWins) {
  ParseResult result = parse(
      "kernel  both 10.0.0.0/24 5432\n"
      "offload both 10.0.0.0/8\n"
      "kernel  both any\n");
  const Config& config = result.config;
  EXPECT_EQ(decide_client(config, "10.0.0.9", 5432).reason, "test.conf:1");
  EXPECT_EQ(decide_client(config, "10.0.0.9", 5432).action, Action::kernel);
  EXPECT_EQ(decide_client(config, "10.0.0.9", 80).reason, "test.conf:2");
  EXPECT_EQ(decide_client(config, "10.0.0.9", 80).action, Action::offload);
  EXPECT_EQ(decide_client(config, "10.9.0.9", 5432).reason, "test.conf:2");
  EXPECT_EQ(decide_client(config, "192.0.2.1", 80).reason, "test.conf:3");
  EXPECT_EQ(decide_client(config, "192.0.2.1", 80).action, Action::kernel);
}

TEST(ConfigRules, NoMatchingRuleMeansKernel) {
  ParseResult result = parse("offload both 10.0.0.0/8\n");
  Decision decision = decide_client(result.config, "192.0.2.1", 80);
  EXPECT_EQ(decision.action, Action::kernel);
  EXPECT_EQ(decision.reason, "no rule matched");
}

TEST(ConfigRules, FileWithoutRulesKeepsTheBuiltInPolicy) {
  for (std::string_view text : {"", "# nothing\n\n", "spin_time = 5us\n", "\n\n\n"}) {
    ParseResult result = parse(text);
    Decision decision = decide_client(result.config, "192.0.2.1", 80);
    EXPECT_EQ(decision.action, Action::offload) << text;
    EXPECT_EQ(decision.reason, "built-in default") << text;
  }
}

TEST(ConfigRules, TunableMistakesDoNotChangeThePolicy) {
  for (std::string_view text : {"inline_sise = 5\n", "spin_time = 5\n", "spin_time 5us\n"}) {
    ParseResult result = parse(text);
    EXPECT_EQ(result.diagnostics.size(), 1u) << text;
    EXPECT_EQ(decide_client(result.config, "192.0.2.1", 80).reason, "built-in default") << text;
  }
}

TEST(ConfigRules, ABadRuleLineOffloadsNothing) {
  // The only rule is broken: it must not fall back to "offload everything".
  ParseResult result = parse("ofload both 10.0.0.0/8\n");
  EXPECT_EQ(result.diagnostics.size(), 1u);
  Decision decision = decide_client(result.config, "10.1.1.1", 80);
  EXPECT_EQ(decision.action, Action::kernel);
  EXPECT_EQ(decision.reason, "no rule matched");
}

TEST(ConfigRules, OneBadLineAmongGoodOnes) {
  ParseResult result = parse(
      "offload client 10.1.0.0/16\n"
      "offload client 10.2.0.0/16 80,\n"       // bad PORTS
      "kernel  client 10.3.0.0/16\n"
      "inline_size = 2K\n"                     // bad value
      "spin_time = 50us\n"
      "offload both 10.0.0.0/8\n");
  ASSERT_EQ(result.diagnostics.size(), 2u);
  EXPECT_EQ(result.diagnostics[0],
            "test.conf:2: bad PORTS '80,': empty entry in the port list; line ignored");
  EXPECT_EQ(result.diagnostics[1],
            "test.conf:4: inline_size: '2K' is above the maximum 1K; default auto kept");
  const Config& config = result.config;
  EXPECT_EQ(config.rules().size(), 3u);
  EXPECT_EQ(decide_client(config, "10.1.0.1", 80).reason, "test.conf:1");
  // The broken line's traffic falls through to the later catch-all.
  EXPECT_EQ(decide_client(config, "10.2.0.1", 80).reason, "test.conf:6");
  EXPECT_EQ(decide_client(config, "10.3.0.1", 80).action, Action::kernel);
  EXPECT_EQ(config.tunables().spin_time, std::chrono::microseconds{50});
  EXPECT_FALSE(config.tunables().inline_size.has_value());
}

TEST(ConfigRules, RoleMatching) {
  ParseResult result = parse(
      "offload client 10.0.0.0/8\n"
      "kernel  server 10.0.0.0/8\n"
      "offload both   192.0.2.0/24\n");
  const Config& config = result.config;
  EXPECT_EQ(decide_client(config, "10.0.0.2", 80).reason, "test.conf:1");
  EXPECT_EQ(decide_server(config, "10.0.0.1", 80, "10.0.0.2").reason, "test.conf:2");
  EXPECT_EQ(decide_client(config, "192.0.2.2", 80).reason, "test.conf:3");
  EXPECT_EQ(decide_server(config, "10.0.0.1", 80, "192.0.2.2").reason, "test.conf:3");
}

TEST(ConfigRules, PortsAreTheServicePort) {
  ParseResult result = parse("offload both any 5000\n");
  const Config& config = result.config;
  // Client: the peer's port is the service.
  EXPECT_EQ(decide(config, {"10.0.0.1", 40000, "10.0.0.2", 5000, Role::client}).action,
            Action::offload);
  EXPECT_EQ(decide(config, {"10.0.0.1", 5000, "10.0.0.2", 40000, Role::client}).action,
            Action::kernel);
  // Server: the local (listening) port is the service.
  EXPECT_EQ(decide(config, {"10.0.0.1", 5000, "10.0.0.2", 40000, Role::server}).action,
            Action::offload);
  EXPECT_EQ(decide(config, {"10.0.0.1", 40000, "10.0.0.2", 5000, Role::server}).action,
            Action::kernel);
}

TEST(ConfigRules, PortListsAndRanges) {
  ParseResult result = parse("offload client any 22,5000-5002,any_port_here\n"
                             "offload client any 22,5000-5002\n");
  ASSERT_EQ(result.diagnostics.size(), 1u);
  const Config& config = result.config;
  EXPECT_EQ(decide_client(config, "10.0.0.2", 22).reason, "test.conf:2");
  EXPECT_EQ(decide_client(config, "10.0.0.2", 5001).action, Action::offload);
  EXPECT_EQ(decide_client(config, "10.0.0.2", 5003).action, Action::kernel);
  EXPECT_EQ(decide_client(config, "10.0.0.2", 23).action, Action::kernel);
}

TEST(ConfigRules, AnySpellings) {
  ParseResult result = parse("offload both * any any\n"
                             "offload both any *   *\n");
  EXPECT_TRUE(result.diagnostics.empty());
  EXPECT_EQ(decide_client(result.config, "fd77::1", 1).reason, "test.conf:1");
}

TEST(ConfigRules, LocalNetwork) {
  ParseResult result = parse(
      "offload both any * 10.77.0.0/16\n"
      "kernel  both any * fd77::/64\n"
      "offload both any * [fd78::]/64\n");
  const Config& config = result.config;
  EXPECT_EQ(decide(config, {"10.77.1.1", 40000, "192.0.2.1", 80, Role::client}).reason,
            "test.conf:1");
  EXPECT_EQ(decide(config, {"10.78.1.1", 40000, "192.0.2.1", 80, Role::client}).reason,
            "no rule matched");
  EXPECT_EQ(decide(config, {"fd77::5", 40000, "fd99::1", 80, Role::client}).reason,
            "test.conf:2");
  EXPECT_EQ(decide(config, {"fd78::5", 80, "fd99::1", 40000, Role::server}).reason,
            "test.conf:3");
}

TEST(ConfigRules, MappedAddressesFollowIpv4Rules) {
  ParseResult result = parse(
      "kernel  both 10.77.0.9\n"
      "offload both 10.77.0.0/24 * 10.0.0.0/8\n"
      "offload both fd77::/64\n");
  const Config& config = result.config;
  // A dual-stack (Java) socket sees IPv4 peers and its own address as mapped.
  EXPECT_EQ(decide(config, {"::ffff:10.0.0.1", 40000, "::ffff:10.77.0.5", 80, Role::client})
                .reason,
            "test.conf:2");
  EXPECT_EQ(decide(config, {"::ffff:10.0.0.1", 40000, "::ffff:10.77.0.9", 80, Role::client})
                .reason,
            "test.conf:1");
  EXPECT_EQ(decide(config, {"::ffff:10.0.0.1", 40000, "::ffff:10.78.0.5", 80, Role::client})
                .reason,
            "no rule matched");
  // IPv6 rules do not claim mapped peers.
  EXPECT_EQ(decide(config, {"fd77::1", 40000, "::ffff:10.78.0.5", 80, Role::client}).reason,
            "no rule matched");
}

TEST(ConfigRules, AnyMatchesMappedPeers) {
  ParseResult result = parse("offload client any\n");
  EXPECT_EQ(decide(result.config, {"::ffff:10.0.0.1", 1, "::ffff:10.0.0.2", 2, Role::client})
                .reason,
            "test.conf:1");
  EXPECT_EQ(decide(result.config, {"::ffff:10.0.0.1", 1, "::ffff:10.0.0.2", 2, Role::server})
                .reason,
            "no rule matched");
}

TEST(ConfigRules, NonIpAddressesStayOnTheKernel) {
  Config config;
  sockaddr_un unix_address{};
  unix_address.sun_family = AF_UNIX;
  sockaddr_storage ipv4 = socket_address("10.0.0.1", 80);
  auto* ip = reinterpret_cast<sockaddr*>(&ipv4);
  auto* unix_socket = reinterpret_cast<sockaddr*>(&unix_address);
  for (auto [local, peer] : {std::pair{ip, unix_socket}, std::pair{unix_socket, ip},
                             std::pair<sockaddr*, sockaddr*>{nullptr, ip},
                             std::pair<sockaddr*, sockaddr*>{ip, nullptr}}) {
    Decision decision = config.decide(local, peer, Role::client);
    EXPECT_EQ(decision.action, Action::kernel);
    EXPECT_EQ(decision.reason, "not an IP address");
  }
}

TEST(ConfigRules, CommentsBlanksTabsAndCrlf) {
  ParseResult result = parse(
      "   # indented comment\n"
      "\t\n"
      "offload\tclient\t10.0.0.0/8\t80 # inline comment\r\n"
      "kernel client any#comment right after a field\r\n"
      "\r\n"
      "spin_time=5us#no spaces\n"
      "  upgrade_timeout   =   3s   \n"
      "offload server any");  // no final newline
  EXPECT_TRUE(result.diagnostics.empty()) << result.diagnostics.front();
  const Config& config = result.config;
  ASSERT_EQ(config.rules().size(), 3u);
  EXPECT_EQ(decide_client(config, "10.0.0.2", 80).reason, "test.conf:3");
  EXPECT_EQ(decide_client(config, "10.0.0.2", 81).reason, "test.conf:4");
  EXPECT_EQ(decide_server(config, "10.0.0.1", 81, "10.0.0.2").reason, "test.conf:8");
  EXPECT_EQ(config.tunables().spin_time, std::chrono::microseconds{5});
  EXPECT_EQ(config.tunables().upgrade_timeout, std::chrono::seconds{3});
}

TEST(ConfigRules, ActionAndRoleErrors) {
  EXPECT_EQ(only_diagnostic("ofload both any\n"),
            "test.conf:1: unknown action 'ofload' (expected offload or kernel); line ignored");
  EXPECT_EQ(only_diagnostic("\n\nOFFLOAD both any\n"),
            "test.conf:3: unknown action 'OFFLOAD' (expected offload or kernel); line ignored");
  EXPECT_EQ(only_diagnostic("offload\n"),
            "test.conf:1: missing ROLE (expected client, server or both); line ignored");
  EXPECT_EQ(only_diagnostic("offload clients any\n"),
            "test.conf:1: unknown role 'clients' (expected client, server or both); line "
            "ignored");
  EXPECT_EQ(only_diagnostic("kernel both\n"),
            "test.conf:1: missing PEER (an address, a network such as 10.0.0.0/24, or any); "
            "line ignored");
}

TEST(ConfigRules, NetworkAndPortErrors) {
  EXPECT_EQ(only_diagnostic("offload both 10.77.0.1/24\n"),
            "test.conf:1: bad PEER '10.77.0.1/24': host bits are set past the /24 prefix (did "
            "you mean 10.77.0.0/24?); line ignored");
  EXPECT_EQ(only_diagnostic("offload both fd77::1/64\n"),
            "test.conf:1: bad PEER 'fd77::1/64': host bits are set past the /64 prefix (did "
            "you mean fd77::/64?); line ignored");
  EXPECT_EQ(only_diagnostic("offload both 10.0.0.0/33\n"),
            "test.conf:1: bad PEER '10.0.0.0/33': prefix length '33' is longer than 32; line "
            "ignored");
  EXPECT_EQ(only_diagnostic("offload both example.com\n"),
            "test.conf:1: bad PEER 'example.com': not an IPv4 address; line ignored");
  EXPECT_EQ(only_diagnostic("offload both any 0\n"),
            "test.conf:1: bad PORTS '0': port 0 is not a valid port; line ignored");
  EXPECT_EQ(only_diagnostic("offload both any 65536\n"),
            "test.conf:1: bad PORTS '65536': port '65536' is above 65535; line ignored");
  EXPECT_EQ(only_diagnostic("offload both any 9-7\n"),
            "test.conf:1: bad PORTS '9-7': range '9-7' ends before it starts (write 7-9); line "
            "ignored");
  EXPECT_EQ(only_diagnostic("offload both any * 10.0.0.1/8\n"),
            "test.conf:1: bad LOCAL '10.0.0.1/8': host bits are set past the /8 prefix (did you "
            "mean 10.0.0.0/8?); line ignored");
  EXPECT_EQ(only_diagnostic("offload both any 5000, 6000\n"),
            "test.conf:1: bad PORTS '5000,': empty entry in the port list; line ignored");
  EXPECT_EQ(only_diagnostic("offload both any * any extra words\n"),
            "test.conf:1: too many fields from 'extra' on (expected ACTION ROLE PEER [PORTS "
            "[LOCAL]]); line ignored");
}

TEST(ConfigRules, MixedUpLines) {
  EXPECT_EQ(only_diagnostic("inline_size 128\n"),
            "test.conf:1: missing '=' after tunable inline_size; line ignored");
  ParseResult equals_in_rule = parse("offload both any = 5\n");
  ASSERT_EQ(equals_in_rule.diagnostics.size(), 1u);
  EXPECT_EQ(equals_in_rule.diagnostics[0], "test.conf:1: '=' in a rule line; line ignored");
  EXPECT_EQ(decide_client(equals_in_rule.config, "10.0.0.1", 1).action, Action::kernel);
}

TEST(ConfigRules, OverlongLine) {
  std::string line = "offload both any " + std::string(5000, ' ') + "\n";
  ParseResult result = parse("kernel both 10.0.0.0/8\n" + line + "offload both any\n");
  ASSERT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(result.diagnostics[0],
            "test.conf:2: line longer than 4096 characters; line ignored");
  EXPECT_EQ(result.config.rules().size(), 2u);
  EXPECT_EQ(decide_client(result.config, "192.0.2.1", 1).reason, "test.conf:3");
  // Exactly the limit is fine.
  std::string longest = "offload both any" + std::string(4096 - 16, ' ');
  EXPECT_TRUE(parse(longest).diagnostics.empty());
  EXPECT_EQ(parse(longest + " ").diagnostics.size(), 1u);
}

TEST(ConfigRules, OverlongCommentDoesNotTurnOffTheDefault) {
  ParseResult result = parse("# " + std::string(5000, 'x') + "\n");
  EXPECT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(decide_client(result.config, "192.0.2.1", 1).reason, "built-in default");
}

TEST(ConfigRules, NulByte) {
  using namespace std::string_view_literals;
  ParseResult result = parse("offload both 10.0.0.0/8\nkernel both\0 any\noffload both any\n"sv);
  ASSERT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(result.diagnostics[0], "test.conf:2: NUL byte in the line; line ignored");
  EXPECT_EQ(result.config.rules().size(), 2u);
  // A line we could not read counts as a rule: unmatched traffic stays on the kernel.
  ParseResult alone = parse("\0\0\0\n"sv);
  EXPECT_EQ(alone.diagnostics.size(), 1u);
  EXPECT_EQ(decide_client(alone.config, "192.0.2.1", 1).reason, "no rule matched");
}

TEST(ConfigRules, InvalidUtf8) {
  ParseResult result = parse("offload both any 80\nkernel b\xf6th any\n");
  ASSERT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(result.diagnostics[0], "test.conf:2: invalid UTF-8; line ignored");
  EXPECT_EQ(result.config.rules().size(), 1u);
  // Only the part before '#' matters: a Latin-1 comment is no problem.
  ParseResult comment = parse("offload both any # caf\xe9\n");
  EXPECT_TRUE(comment.diagnostics.empty());
  EXPECT_EQ(comment.config.rules().size(), 1u);
  // Valid UTF-8 that is not a keyword is an ordinary mistake, quoted as it is.
  EXPECT_EQ(only_diagnostic("\xc3\xa9 both any\n"),
            "test.conf:1: unknown action '\xc3\xa9' (expected offload or kernel); line ignored");
}

TEST(ConfigRules, ControlCharactersAreEscapedInMessages) {
  EXPECT_EQ(only_diagnostic("\x1b[2Joffload both any\n"),
            "test.conf:1: unknown action '\\x1b[2Joffload' (expected offload or kernel); line "
            "ignored");
}

TEST(ConfigRules, DiagnosticsAreCapped) {
  std::string text;
  for (int line = 0; line < 250; ++line) text += "junk\n";
  ParseResult result = parse(text);
  ASSERT_EQ(result.diagnostics.size(), 101u);
  EXPECT_EQ(result.diagnostics[99],
            "test.conf:100: unknown action 'junk' (expected offload or kernel); line ignored");
  EXPECT_EQ(result.diagnostics[100], "test.conf: 150 more problems not reported");
}

TEST(ConfigRules, ReasonsSurviveMovingTheResult) {
  ParseResult result = parse("offload both 10.0.0.0/8\n");
  ParseResult moved = std::move(result);
  Config config = std::move(moved.config);
  EXPECT_EQ(decide_client(config, "10.0.0.2", 1).reason, "test.conf:1");
  EXPECT_EQ(decide_client(config, "11.0.0.2", 1).reason, "no rule matched");
}

}  // namespace
}  // namespace qpsock::config
