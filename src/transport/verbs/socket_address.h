// IPv4 and IPv6 socket addresses as the connector and listener take them.
#pragma once

#include <sys/socket.h>

#include <cstdint>

namespace qpsock::transport::verbs {

bool is_inet_address(const sockaddr_storage& address);

// "10.77.0.1:7471" or "[fd77::1]:7471", for log lines.
struct AddressText {
  char text[64];
  const char* c_str() const { return text; }
};
AddressText describe_address(const sockaddr_storage& address);

}  // namespace qpsock::transport::verbs
