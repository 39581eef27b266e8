#include "config/ip_network.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstring>

namespace qpsock::config {
namespace {

IpAddress address(const char* text) {
  sockaddr_storage storage{};
  if (std::strchr(text, ':') != nullptr) {
    auto* ipv6 = reinterpret_cast<sockaddr_in6*>(&storage);
    ipv6->sin6_family = AF_INET6;
    EXPECT_EQ(inet_pton(AF_INET6, text, &ipv6->sin6_addr), 1) << text;
  } else {
    auto* ipv4 = reinterpret_cast<sockaddr_in*>(&storage);
    ipv4->sin_family = AF_INET;
    EXPECT_EQ(inet_pton(AF_INET, text, &ipv4->sin_addr), 1) << text;
  }
  return endpoint_from_sockaddr(reinterpret_cast<sockaddr*>(&storage))->address;
}

IpNetwork network(std::string_view text) {
  auto parsed = IpNetwork::parse(text);
  EXPECT_TRUE(parsed.ok()) << text << ": " << parsed.error;
  return parsed.ok() ? *parsed.value : IpNetwork::any();
}

std::string parse_error(std::string_view text) { return IpNetwork::parse(text).error; }

TEST(ConfigIpNetwork, AnyMatchesEveryAddress) {
  for (std::string_view spelling : {"any", "*"}) {
    IpNetwork everything = network(spelling);
    EXPECT_TRUE(everything.matches_everything());
    EXPECT_TRUE(everything.contains(address("10.1.2.3")));
    EXPECT_TRUE(everything.contains(address("fd77::1")));
    EXPECT_TRUE(everything.contains(address("::ffff:10.1.2.3")));
    EXPECT_EQ(everything.to_string(), "any");
  }
}

TEST(ConfigIpNetwork, Ipv4Networks) {
  IpNetwork subnet = network("10.77.0.0/24");
  EXPECT_TRUE(subnet.contains(address("10.77.0.0")));
  EXPECT_TRUE(subnet.contains(address("10.77.0.255")));
  EXPECT_FALSE(subnet.contains(address("10.77.1.0")));
  EXPECT_FALSE(subnet.contains(address("fd77::1")));
  EXPECT_EQ(subnet.to_string(), "10.77.0.0/24");

  IpNetwork odd_prefix = network("192.168.0.0/23");
  EXPECT_TRUE(odd_prefix.contains(address("192.168.1.200")));
  EXPECT_FALSE(odd_prefix.contains(address("192.168.2.1")));

  EXPECT_TRUE(network("0.0.0.0/0").contains(address("255.255.255.255")));
  EXPECT_FALSE(network("0.0.0.0/0").contains(address("::1")));
}

TEST(ConfigIpNetwork, BareAddressIsOneHost) {
  IpNetwork host = network("10.0.0.7");
  EXPECT_EQ(host.to_string(), "10.0.0.7/32");
  EXPECT_TRUE(host.contains(address("10.0.0.7")));
  EXPECT_FALSE(host.contains(address("10.0.0.8")));
  IpNetwork host6 = network("fd77::7");
  EXPECT_EQ(host6.to_string(), "fd77::7/128");
  EXPECT_TRUE(host6.contains(address("fd77::7")));
  EXPECT_FALSE(host6.contains(address("fd77::8")));
}

TEST(ConfigIpNetwork, Ipv6Networks) {
  IpNetwork subnet = network("fd77::/64");
  EXPECT_TRUE(subnet.contains(address("fd77::1")));
  EXPECT_TRUE(subnet.contains(address("fd77::ffff:ffff:ffff:ffff")));
  EXPECT_FALSE(subnet.contains(address("fd77:0:0:1::1")));
  EXPECT_FALSE(subnet.contains(address("10.0.0.1")));
  EXPECT_EQ(network("[fd77::]/64").to_string(), "fd77::/64");
  EXPECT_EQ(network("[fd77::1]").to_string(), "fd77::1/128");
  IpNetwork odd_prefix = network("fd77:8000::/17");
  EXPECT_TRUE(odd_prefix.contains(address("fd77:ffff::1")));
  EXPECT_FALSE(odd_prefix.contains(address("fd77:7fff::1")));
}

TEST(ConfigIpNetwork, MappedAddressesAreTheirIpv4Address) {
  IpNetwork ipv4_rule = network("10.77.0.0/24");
  EXPECT_TRUE(ipv4_rule.contains(address("::ffff:10.77.0.9")));
  EXPECT_FALSE(ipv4_rule.contains(address("::ffff:10.78.0.9")));
  // A network written in the mapped form is the IPv4 network.
  IpNetwork mapped_rule = network("::ffff:10.77.0.0/120");
  EXPECT_EQ(mapped_rule.to_string(), "10.77.0.0/24");
  EXPECT_TRUE(mapped_rule.contains(address("10.77.0.9")));
  EXPECT_TRUE(mapped_rule.contains(address("::ffff:10.77.0.9")));
  EXPECT_EQ(network("::ffff:10.0.0.1").to_string(), "10.0.0.1/32");
  // IPv6 networks do not see mapped peers: they are IPv4 peers.
  EXPECT_FALSE(network("::/0").contains(address("::ffff:10.77.0.9")));
  EXPECT_TRUE(network("::/0").contains(address("fd77::9")));
}

TEST(ConfigIpNetwork, HostBitsAreAnErrorWithASuggestion) {
  EXPECT_EQ(parse_error("10.77.0.1/24"),
            "host bits are set past the /24 prefix (did you mean 10.77.0.0/24?)");
  EXPECT_EQ(parse_error("fd77::1/64"),
            "host bits are set past the /64 prefix (did you mean fd77::/64?)");
  EXPECT_EQ(parse_error("10.0.0.128/25").empty(), true);
  EXPECT_EQ(parse_error("10.0.0.129/25"),
            "host bits are set past the /25 prefix (did you mean 10.0.0.128/25?)");
}

TEST(ConfigIpNetwork, SyntaxErrors) {
  EXPECT_EQ(parse_error("10.0.0.0/33"), "prefix length '33' is longer than 32");
  EXPECT_EQ(parse_error("fd77::/129"), "prefix length '129' is longer than 128");
  EXPECT_EQ(parse_error("10.0.0.0/"), "missing prefix length after '/'");
  EXPECT_EQ(parse_error("10.0.0.0/x"), "prefix length 'x' is not a number");
  EXPECT_EQ(parse_error("10.0.0.0/-1"), "prefix length '-1' is not a number");
  EXPECT_EQ(parse_error("10.0.0.0/8/8"), "prefix length '8/8' is not a number");
  EXPECT_EQ(parse_error("10.0.0"), "not an IPv4 address");
  EXPECT_EQ(parse_error("10"), "not an IPv4 address");
  EXPECT_EQ(parse_error("10.0.0.256"), "not an IPv4 address");
  EXPECT_EQ(parse_error("host.example"), "not an IPv4 address");
  EXPECT_EQ(parse_error("fd77:::1"), "not an IPv6 address");
  EXPECT_EQ(parse_error("fe80::1%eth0"), "not an IPv6 address");
  EXPECT_EQ(parse_error("[fd77::/64"), "missing ']' after the IPv6 address");
  EXPECT_EQ(parse_error("[10.0.0.1]"), "brackets are only for IPv6 addresses");
  EXPECT_EQ(parse_error("/8"), "not an IPv4 or IPv6 address");
  EXPECT_EQ(parse_error(std::string(100, '1')), "not an IPv4 or IPv6 address");
  EXPECT_FALSE(IpNetwork::parse("ANY").ok());
}

TEST(ConfigIpNetwork, EndpointsFromSockaddr) {
  sockaddr_in ipv4{};
  ipv4.sin_family = AF_INET;
  ipv4.sin_port = htons(5001);
  inet_pton(AF_INET, "10.1.2.3", &ipv4.sin_addr);
  auto endpoint = endpoint_from_sockaddr(reinterpret_cast<sockaddr*>(&ipv4));
  ASSERT_TRUE(endpoint);
  EXPECT_EQ(endpoint->port, 5001);
  EXPECT_EQ(endpoint->address.family, IpFamily::v4);

  sockaddr_in6 mapped{};
  mapped.sin6_family = AF_INET6;
  mapped.sin6_port = htons(80);
  inet_pton(AF_INET6, "::ffff:10.1.2.3", &mapped.sin6_addr);
  auto mapped_endpoint = endpoint_from_sockaddr(reinterpret_cast<sockaddr*>(&mapped));
  ASSERT_TRUE(mapped_endpoint);
  EXPECT_EQ(mapped_endpoint->port, 80);
  EXPECT_EQ(mapped_endpoint->address.family, IpFamily::v4);
  EXPECT_EQ(std::memcmp(mapped_endpoint->address.bytes.data(),
                        endpoint->address.bytes.data(), 16), 0);

  sockaddr unix_address{};
  unix_address.sa_family = AF_UNIX;
  EXPECT_FALSE(endpoint_from_sockaddr(&unix_address));
  EXPECT_FALSE(endpoint_from_sockaddr(nullptr));
}

}  // namespace
}  // namespace qpsock::config
