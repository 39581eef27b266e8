// IP addresses as the rules see them, and the networks rules name.
//
// An IPv4-mapped IPv6 address (::ffff:a.b.c.d, what a dual-stack socket such
// as Java's reports for an IPv4 peer) is the IPv4 address it carries, both in
// a connection's endpoints and in a rule: the user thinks of that peer as
// a.b.c.d, and an IPv4 rule must match it.
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config/parse_outcome.h"

namespace qpsock::config {

enum class IpFamily : uint8_t { v4, v6 };

struct IpAddress {
  IpFamily family = IpFamily::v4;
  // IPv4 in the first 4 bytes, the rest zero; IPv6 in all 16.
  std::array<uint8_t, 16> bytes{};
};

struct IpEndpoint {
  IpAddress address;
  uint16_t port = 0;  // host byte order
};

// sockaddr_in or sockaddr_in6 (mapped addresses become IPv4); nothing for any
// other family or a null pointer.
std::optional<IpEndpoint> endpoint_from_sockaddr(const sockaddr* address);

class IpNetwork {
 public:
  // Matches every address of either family.
  static IpNetwork any();
  // "any", "*", "a.b.c.d[/n]", "x::y[/n]", "[x::y][/n]". The error explains
  // what is wrong, including host bits set past the prefix (with the network
  // the user probably meant).
  static ParseOutcome<IpNetwork> parse(std::string_view text);

  bool contains(const IpAddress& address) const;
  bool matches_everything() const { return matches_everything_; }
  // Canonical spelling: "any", "10.0.0.0/24", "fd77::/64".
  std::string to_string() const;

 private:
  bool matches_everything_ = true;
  IpAddress network_;
  unsigned prefix_length_ = 0;
};

}  // namespace qpsock::config
