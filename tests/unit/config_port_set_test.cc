#include "config/port_set.h"

#include <gtest/gtest.h>

namespace qpsock::config {
namespace {

PortSet ports(std::string_view text) {
  auto parsed = PortSet::parse(text);
  EXPECT_TRUE(parsed.ok()) << text << ": " << parsed.error;
  return parsed.ok() ? *parsed.value : PortSet::any();
}

std::string parse_error(std::string_view text) { return PortSet::parse(text).error; }

TEST(ConfigPortSet, AnyPort) {
  for (std::string_view spelling : {"*", "any"}) {
    PortSet every_port = ports(spelling);
    EXPECT_TRUE(every_port.matches_everything());
    EXPECT_TRUE(every_port.contains(1));
    EXPECT_TRUE(every_port.contains(65535));
    EXPECT_EQ(every_port.to_string(), "*");
  }
}

TEST(ConfigPortSet, SinglePortRangeAndList) {
  PortSet single = ports("22");
  EXPECT_TRUE(single.contains(22));
  EXPECT_FALSE(single.contains(23));
  EXPECT_FALSE(single.contains(21));

  PortSet range = ports("5000-5999");
  EXPECT_FALSE(range.contains(4999));
  EXPECT_TRUE(range.contains(5000));
  EXPECT_TRUE(range.contains(5999));
  EXPECT_FALSE(range.contains(6000));

  PortSet list = ports("5000-5999,7000,1-2,65535");
  EXPECT_TRUE(list.contains(5500));
  EXPECT_TRUE(list.contains(7000));
  EXPECT_FALSE(list.contains(7001));
  EXPECT_TRUE(list.contains(1));
  EXPECT_TRUE(list.contains(2));
  EXPECT_FALSE(list.contains(3));
  EXPECT_TRUE(list.contains(65535));
  EXPECT_EQ(list.to_string(), "5000-5999,7000,1-2,65535");
  EXPECT_EQ(ports("80-80").to_string(), "80");
}

TEST(ConfigPortSet, Errors) {
  EXPECT_EQ(parse_error("0"), "port 0 is not a valid port");
  EXPECT_EQ(parse_error("0-10"), "port 0 is not a valid port");
  EXPECT_EQ(parse_error("65536"), "port '65536' is above 65535");
  EXPECT_EQ(parse_error("99999999999999999999999"), "port '99999999999999999999999' is above 65535");
  EXPECT_EQ(parse_error("6000-5000"), "range '6000-5000' ends before it starts (write 5000-6000)");
  EXPECT_EQ(parse_error("http"), "'http' is not a port number");
  EXPECT_EQ(parse_error("80,"), "empty entry in the port list");
  EXPECT_EQ(parse_error(",80"), "empty entry in the port list");
  EXPECT_EQ(parse_error("80,,81"), "empty entry in the port list");
  EXPECT_EQ(parse_error("80-"), "a port number is missing");
  EXPECT_EQ(parse_error("-80"), "a port number is missing");
  EXPECT_EQ(parse_error("1-2-3"), "'2-3' is not a port number");
  EXPECT_EQ(parse_error("80,*"), "'*' cannot be part of a list");
  EXPECT_EQ(parse_error("+80"), "'+80' is not a port number");
}

}  // namespace
}  // namespace qpsock::config
