#include "config/ip_network.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

#include "config/config_text.h"
#include "config/value_syntax.h"

namespace qpsock::config {
namespace {

constexpr std::array<uint8_t, 12> kMappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
constexpr unsigned kMappedPrefixBits = 96;

unsigned address_bits(IpFamily family) { return family == IpFamily::v4 ? 32 : 128; }

bool is_mapped(const uint8_t* bytes) {
  return std::memcmp(bytes, kMappedPrefix.data(), kMappedPrefix.size()) == 0;
}

IpAddress from_ipv6_bytes(const uint8_t* bytes) {
  IpAddress address;
  if (is_mapped(bytes)) {
    address.family = IpFamily::v4;
    std::memcpy(address.bytes.data(), bytes + kMappedPrefix.size(), 4);
  } else {
    address.family = IpFamily::v6;
    std::memcpy(address.bytes.data(), bytes, 16);
  }
  return address;
}

// Whether the bits of `address` past `prefix_length` are all zero; clears
// them in `network` either way.
bool clear_host_bits(IpAddress& network, unsigned prefix_length) {
  bool clean = true;
  unsigned total_bits = address_bits(network.family);
  for (unsigned bit = prefix_length; bit < total_bits; ++bit) {
    uint8_t mask = static_cast<uint8_t>(0x80u >> (bit % 8));
    if (network.bytes[bit / 8] & mask) {
      clean = false;
      network.bytes[bit / 8] &= static_cast<uint8_t>(~mask);
    }
  }
  return clean;
}

std::string address_to_string(const IpAddress& address) {
  char text[INET6_ADDRSTRLEN];
  int family = address.family == IpFamily::v4 ? AF_INET : AF_INET6;
  if (inet_ntop(family, address.bytes.data(), text, sizeof(text)) == nullptr) return "?";
  return text;
}

}  // namespace

std::optional<IpEndpoint> endpoint_from_sockaddr(const sockaddr* address) {
  if (address == nullptr) return std::nullopt;
  IpEndpoint endpoint;
  if (address->sa_family == AF_INET) {
    sockaddr_in ipv4;
    std::memcpy(&ipv4, address, sizeof(ipv4));  // the caller's buffer may be unaligned
    endpoint.address.family = IpFamily::v4;
    std::memcpy(endpoint.address.bytes.data(), &ipv4.sin_addr, 4);
    endpoint.port = ntohs(ipv4.sin_port);
    return endpoint;
  }
  if (address->sa_family == AF_INET6) {
    sockaddr_in6 ipv6;
    std::memcpy(&ipv6, address, sizeof(ipv6));
    endpoint.address = from_ipv6_bytes(ipv6.sin6_addr.s6_addr);
    endpoint.port = ntohs(ipv6.sin6_port);
    return endpoint;
  }
  return std::nullopt;
}

IpNetwork IpNetwork::any() { return IpNetwork{}; }

ParseOutcome<IpNetwork> IpNetwork::parse(std::string_view text) {
  using Outcome = ParseOutcome<IpNetwork>;
  if (text == "any" || text == "*") return Outcome::success(any());

  std::string_view address_text = text;
  std::optional<std::string_view> prefix_text;
  if (size_t slash = text.find('/'); slash != std::string_view::npos) {
    address_text = text.substr(0, slash);
    prefix_text = text.substr(slash + 1);
  }
  if (!address_text.empty() && address_text.front() == '[') {
    if (address_text.size() < 2 || address_text.back() != ']') {
      return Outcome::failure("missing ']' after the IPv6 address");
    }
    address_text = address_text.substr(1, address_text.size() - 2);
    if (address_text.find(':') == std::string_view::npos) {
      return Outcome::failure("brackets are only for IPv6 addresses");
    }
  }
  // inet_pton needs a terminated string; anything longer than an IPv6
  // address with an embedded IPv4 one cannot be an address.
  char terminated[INET6_ADDRSTRLEN + 1];
  if (address_text.empty() || address_text.size() >= sizeof(terminated)) {
    return Outcome::failure("not an IPv4 or IPv6 address");
  }
  std::memcpy(terminated, address_text.data(), address_text.size());
  terminated[address_text.size()] = '\0';

  IpNetwork network;
  network.matches_everything_ = false;
  unsigned written_bits;
  if (address_text.find(':') != std::string_view::npos) {
    uint8_t bytes[16];
    if (inet_pton(AF_INET6, terminated, bytes) != 1) {
      return Outcome::failure("not an IPv6 address");
    }
    network.network_.family = IpFamily::v6;
    std::memcpy(network.network_.bytes.data(), bytes, 16);
    written_bits = 128;
  } else {
    // inet_pton, unlike inet_aton, takes only the four-part dotted form, so
    // "10" or "10.1" are rejected instead of silently meaning 0.0.0.10.
    if (inet_pton(AF_INET, terminated, network.network_.bytes.data()) != 1) {
      return Outcome::failure("not an IPv4 address");
    }
    network.network_.family = IpFamily::v4;
    written_bits = 32;
  }

  unsigned prefix_length = written_bits;
  if (prefix_text) {
    if (prefix_text->empty()) return Outcome::failure("missing prefix length after '/'");
    auto parsed = parse_unsigned(*prefix_text);
    if (!parsed.ok()) {
      return Outcome::failure("prefix length " + quote_for_message(*prefix_text) +
                              " is not a number");
    }
    if (*parsed.value > written_bits) {
      return Outcome::failure("prefix length " + quote_for_message(*prefix_text) +
                              " is longer than " + decimal(written_bits));
    }
    prefix_length = static_cast<unsigned>(*parsed.value);
  }

  IpAddress cleared = network.network_;
  if (!clear_host_bits(cleared, prefix_length)) {
    IpNetwork suggestion = network;
    suggestion.network_ = cleared;
    suggestion.prefix_length_ = prefix_length;
    return Outcome::failure("host bits are set past the /" + decimal(prefix_length) +
                            " prefix (did you mean " + suggestion.to_string() + "?)");
  }
  network.prefix_length_ = prefix_length;

  // A network written in the mapped form (::ffff:10.0.0.0/104) is the IPv4
  // network it carries, because endpoints are normalised the same way.
  if (network.network_.family == IpFamily::v6 && prefix_length >= kMappedPrefixBits &&
      is_mapped(network.network_.bytes.data())) {
    network.network_ = from_ipv6_bytes(network.network_.bytes.data());
    network.prefix_length_ = prefix_length - kMappedPrefixBits;
  }
  return Outcome::success(network);
}

bool IpNetwork::contains(const IpAddress& address) const {
  if (matches_everything_) return true;
  if (address.family != network_.family) return false;
  unsigned whole_bytes = prefix_length_ / 8;
  if (std::memcmp(address.bytes.data(), network_.bytes.data(), whole_bytes) != 0) return false;
  unsigned remaining_bits = prefix_length_ % 8;
  if (remaining_bits == 0) return true;
  auto mask = static_cast<uint8_t>(0xFFu << (8 - remaining_bits));
  return (address.bytes[whole_bytes] & mask) == (network_.bytes[whole_bytes] & mask);
}

std::string IpNetwork::to_string() const {
  if (matches_everything_) return "any";
  return address_to_string(network_) + "/" + decimal(prefix_length_);
}

}  // namespace qpsock::config
