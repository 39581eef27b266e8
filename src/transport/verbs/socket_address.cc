#include "transport/verbs/socket_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdio>
#include <cstring>

namespace qpsock::transport::verbs {

bool is_inet_address(const sockaddr_storage& address) {
  return address.ss_family == AF_INET || address.ss_family == AF_INET6;
}

AddressText describe_address(const sockaddr_storage& address) {
  AddressText described{};
  char host[INET6_ADDRSTRLEN] = "?";
  if (address.ss_family == AF_INET) {
    sockaddr_in ipv4;
    std::memcpy(&ipv4, &address, sizeof(ipv4));
    inet_ntop(AF_INET, &ipv4.sin_addr, host, sizeof(host));
    std::snprintf(described.text, sizeof(described.text), "%s:%u", host, ntohs(ipv4.sin_port));
  } else if (address.ss_family == AF_INET6) {
    sockaddr_in6 ipv6;
    std::memcpy(&ipv6, &address, sizeof(ipv6));
    inet_ntop(AF_INET6, &ipv6.sin6_addr, host, sizeof(host));
    std::snprintf(described.text, sizeof(described.text), "[%s]:%u", host, ntohs(ipv6.sin6_port));
  } else {
    std::snprintf(described.text, sizeof(described.text), "(family %d)", address.ss_family);
  }
  return described;
}

}  // namespace qpsock::transport::verbs
