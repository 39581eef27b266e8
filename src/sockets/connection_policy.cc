#include "sockets/connection_policy.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdio>
#include <cstring>

#include "common/errno_guard.h"
#include "common/log.h"
#include "config/config_loader.h"
#include "libc/next_symbols.h"

namespace qpsock::sockets {
namespace {

// "address:port" or "[address]:port" for the log.
void format_endpoint(const sockaddr_storage& address, char* text, size_t size) {
  char host[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (address.ss_family == AF_INET) {
    const auto& ipv4 = reinterpret_cast<const sockaddr_in&>(address);
    inet_ntop(AF_INET, &ipv4.sin_addr, host, sizeof(host));
    port = ntohs(ipv4.sin_port);
    snprintf(text, size, "%s:%u", host, port);
  } else if (address.ss_family == AF_INET6) {
    const auto& ipv6 = reinterpret_cast<const sockaddr_in6&>(address);
    inet_ntop(AF_INET6, &ipv6.sin6_addr, host, sizeof(host));
    port = ntohs(ipv6.sin6_port);
    snprintf(text, size, "[%s]:%u", host, port);
  } else {
    snprintf(text, size, "?");
  }
}

// An address the caller gave (connect's, or accept's as it wrote it).
void copy_address(const sockaddr* address, sockaddr_storage& into) {
  memcpy(&into, address, address->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
}

}  // namespace

void read_connection_endpoints(int fd, const sockaddr* peer, ConnectionEndpoints& endpoints) {
  ErrnoGuard errno_guard;
  sockaddr_storage& local = endpoints.local;
  sockaddr_storage& remote = endpoints.peer;
  socklen_t length = sizeof(local);
  if (next::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) local.ss_family = AF_UNSPEC;
  if (peer != nullptr) {
    copy_address(peer, remote);
  } else {
    length = sizeof(remote);
    if (next::getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &length) != 0) {
      remote.ss_family = AF_UNSPEC;
    }
  }
}

void read_client_endpoints(int fd, int family, const sockaddr* peer, ConnectionEndpoints& endpoints) {
  if (config::process_config().client_decisions_read_local_address() ||
      (family != AF_INET && family != AF_INET6)) {
    read_connection_endpoints(fd, peer, endpoints);
    return;
  }
  endpoints.local = {};
  endpoints.local.ss_family = static_cast<sa_family_t>(family);
  endpoints.local_read = false;
  copy_address(peer, endpoints.peer);
}

config::Decision decide_for_connection(int fd, config::Role role, const ConnectionEndpoints& endpoints) {
  ErrnoGuard errno_guard;
  const sockaddr_storage& local = endpoints.local;
  const sockaddr_storage& remote = endpoints.peer;
  config::Decision decision = config::process_config().decide(
      reinterpret_cast<const sockaddr*>(&local), reinterpret_cast<const sockaddr*>(&remote), role);
  if (log::enabled(log::Level::info)) {
    char local_text[64], remote_text[64];
    if (endpoints.local_read)
      format_endpoint(local, local_text, sizeof(local_text));
    else
      snprintf(local_text, sizeof(local_text), "*");
    format_endpoint(remote, remote_text, sizeof(remote_text));
    bool offload = decision.action == config::Action::offload;
    log::message(log::Level::info, "fd %d: %s %s %s %s: %s (%.*s)%s", fd,
                 role == config::Role::client ? "client" : "server", local_text,
                 role == config::Role::client ? "->" : "<-", remote_text,
                 offload ? "offload" : "kernel", static_cast<int>(decision.reason.size()),
                 decision.reason.data(),
                 offload ? "; upgraded if the peer runs qpsock (shared memory on this host, RDMA between hosts)" : "");
  }
  return decision;
}

}  // namespace qpsock::sockets
