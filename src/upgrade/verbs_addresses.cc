#include "upgrade/verbs_addresses.h"

#include <netinet/in.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>

#include "common/unique_fd.h"
#include "libc/next_symbols.h"

namespace qpsock::upgrade {
namespace {

socklen_t length_of(const sockaddr_storage& address) {
  return address.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// The kernel's answer to is_local_address for the last few destinations,
// for a second: a client connects to the same few servers again and again,
// and the probe is three system calls (a socket made, bound and closed) in
// every connect(). An address added or removed meanwhile is seen up to a
// second late: the connection then offers the other path and stays on TCP.
class LocalityCache {
 public:
  std::optional<bool> find(const sockaddr_storage& address) {
    // connect() may come from a signal handler that interrupted this very
    // lookup: then it probes rather than waits.
    std::unique_lock lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return std::nullopt;
    const auto now = Clock::now();
    for (const Entry& entry : entries_)
      if (entry.used && now - entry.checked < kLifetime && same_host_address(entry.address, address))
        return entry.local;
    return std::nullopt;
  }
  void remember(const sockaddr_storage& address, bool local) {
    std::unique_lock lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    entries_[next_] = {address, local, Clock::now(), true};
    next_ = (next_ + 1) % entries_.size();
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kLifetime{1};
  struct Entry {
    sockaddr_storage address{};
    bool local = false;
    Clock::time_point checked{};
    bool used = false;
  };
  // Family, address and IPv6 scope: the port is 0 in both.
  static bool same_host_address(const sockaddr_storage& left, const sockaddr_storage& right) {
    if (left.ss_family != right.ss_family) return false;
    if (left.ss_family == AF_INET)
      return reinterpret_cast<const sockaddr_in&>(left).sin_addr.s_addr ==
             reinterpret_cast<const sockaddr_in&>(right).sin_addr.s_addr;
    const auto& left6 = reinterpret_cast<const sockaddr_in6&>(left);
    const auto& right6 = reinterpret_cast<const sockaddr_in6&>(right);
    return memcmp(&left6.sin6_addr, &right6.sin6_addr, sizeof(left6.sin6_addr)) == 0 &&
           left6.sin6_scope_id == right6.sin6_scope_id;
  }

  std::mutex mutex_;
  std::array<Entry, 8> entries_{};
  size_t next_ = 0;
};

LocalityCache& locality_cache() {
  // Never destroyed: connect() may come from exit handlers after static destructors.
  alignas(LocalityCache) static unsigned char storage[sizeof(LocalityCache)];
  static LocalityCache* instance = ::new (storage) LocalityCache;
  return *instance;
}

// ::ffff:a.b.c.d becomes a.b.c.d, with the same port.
void unmap_ipv4(sockaddr_storage& address) {
  if (address.ss_family != AF_INET6) return;
  const auto ipv6 = reinterpret_cast<const sockaddr_in6&>(address);
  if (!IN6_IS_ADDR_V4MAPPED(&ipv6.sin6_addr)) return;
  sockaddr_in ipv4{};
  ipv4.sin_family = AF_INET;
  ipv4.sin_port = ipv6.sin6_port;
  memcpy(&ipv4.sin_addr, &ipv6.sin6_addr.s6_addr[12], sizeof(ipv4.sin_addr));
  address = {};
  memcpy(&address, &ipv4, sizeof(ipv4));
}

int copy_inet(const sockaddr* address, socklen_t length, sockaddr_storage& out) {
  if (address == nullptr ||
      (address->sa_family == AF_INET && length < static_cast<socklen_t>(sizeof(sockaddr_in))) ||
      (address->sa_family == AF_INET6 && length < static_cast<socklen_t>(sizeof(sockaddr_in6))) ||
      (address->sa_family != AF_INET && address->sa_family != AF_INET6))
    return -EAFNOSUPPORT;
  out = {};
  memcpy(&out, address, address->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
  unmap_ipv4(out);
  return 0;
}

uint16_t port_of(const sockaddr_storage& address) {
  return address.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(address).sin6_port
                                       : reinterpret_cast<const sockaddr_in&>(address).sin_port;
}

void set_port(sockaddr_storage& address, uint16_t network_port) {
  if (address.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6&>(address).sin6_port = network_port;
  else
    reinterpret_cast<sockaddr_in&>(address).sin_port = network_port;
}

bool is_wildcard(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET6)
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6&>(address).sin6_addr);
  return reinterpret_cast<const sockaddr_in&>(address).sin_addr.s_addr == htonl(INADDR_ANY);
}

int local_address_of(int fd, sockaddr_storage& address) {
  socklen_t length = sizeof(address);
  address = {};
  if (next::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return -errno;
  return 0;
}

// The source address the kernel's route to `destination` gives (a connected
// datagram socket sends nothing: it only looks the route up).
int routed_source(const sockaddr_storage& destination, sockaddr_storage& source) {
  UniqueFd probe(next::socket(destination.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!probe.valid()) return -errno;
  if (next::connect(probe.get(), reinterpret_cast<const sockaddr*>(&destination),
                    length_of(destination)) != 0)
    return -errno;
  if (int error = local_address_of(probe.get(), source); error < 0) return error;
  unmap_ipv4(source);
  return 0;
}

// A socket with no port yet (unbound, or bound to `bound`'s address with
// IP_BIND_ADDRESS_NO_PORT, which leaves the port to connect()) is bound to
// that address and port 0 now, so that the kernel picks the port before the
// SYN. The kernel takes the second bind because no port is held yet; it
// picks one only with the option off, which is put back afterwards (from
// here on it changes nothing: connect() keeps a port it finds). The cost is
// the option's gain: the port is this socket's alone, not shared with
// connections to other destinations.
int bind_port_now(int tcp_fd, const sockaddr_storage& bound) {
  int no_port = 0;
  socklen_t option_length = sizeof(no_port);
  if (next::getsockopt(tcp_fd, SOL_IP, IP_BIND_ADDRESS_NO_PORT, &no_port, &option_length) != 0)
    no_port = 0;
  const int off = 0;
  if (no_port != 0 &&
      next::setsockopt(tcp_fd, SOL_IP, IP_BIND_ADDRESS_NO_PORT, &off, sizeof(off)) != 0)
    return -errno;
  // Its own address (the wildcard of its own family when unbound: an
  // AF_INET6 socket talking IPv4 stays AF_INET6), port 0.
  const int bound_now =
      next::bind(tcp_fd, reinterpret_cast<const sockaddr*>(&bound), length_of(bound)) == 0 ? 0 : -errno;
  if (no_port != 0) {
    next::setsockopt(tcp_fd, SOL_IP, IP_BIND_ADDRESS_NO_PORT, &no_port, sizeof(no_port));
    // A bind that failed (no port free for this socket alone, where connect()
    // could still share one) has cleared the address: the application's is
    // put back, its port again left to connect().
    if (bound_now < 0)
      next::bind(tcp_fd, reinterpret_cast<const sockaddr*>(&bound), length_of(bound));
  }
  return bound_now;
}

}  // namespace

bool is_local_address(const sockaddr* address, socklen_t length) {
  sockaddr_storage local{};
  if (copy_inet(address, length, local) < 0) return false;
  set_port(local, 0);
  if (const std::optional<bool> known = locality_cache().find(local)) return *known;
  UniqueFd probe(next::socket(local.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!probe.valid()) return false;
  const bool is_local =
      next::bind(probe.get(), reinterpret_cast<const sockaddr*>(&local), length_of(local)) == 0;
  // Only the kernel's "not an address of ours" is an answer; no memory or
  // no free port says nothing for the next connect.
  if (is_local || errno == EADDRNOTAVAIL) locality_cache().remember(local, is_local);
  return is_local;
}

int client_meeting_address(int tcp_fd, const sockaddr* destination, socklen_t length,
                           sockaddr_storage& meeting) {
  sockaddr_storage target{};
  if (int error = copy_inet(destination, length, target); error < 0) return error;
  sockaddr_storage bound{};
  if (int error = local_address_of(tcp_fd, bound); error < 0) return error;
  if (port_of(bound) == 0) {
    if (int error = bind_port_now(tcp_fd, bound); error < 0) return error;
    if (int error = local_address_of(tcp_fd, bound); error < 0) return error;
  }
  unmap_ipv4(bound);
  if (is_wildcard(bound)) {
    const uint16_t port = port_of(bound);
    if (int error = routed_source(target, bound); error < 0) return error;
    set_port(bound, port);
  }
  meeting = bound;
  return 0;
}

int connected_meeting_address(int tcp_fd, sockaddr_storage& meeting) {
  if (int error = local_address_of(tcp_fd, meeting); error < 0) return error;
  unmap_ipv4(meeting);
  return 0;
}

int server_meeting_addresses(int tcp_fd, sockaddr_storage& local, sockaddr_storage& peer) {
  if (int error = local_address_of(tcp_fd, local); error < 0) return error;
  socklen_t length = sizeof(peer);
  peer = {};
  if (next::getpeername(tcp_fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) return -errno;
  unmap_ipv4(local);
  unmap_ipv4(peer);
  set_port(local, 0);
  return 0;
}

bool is_tcp_peer_address(const sockaddr_storage& tcp_peer, const sockaddr* cm_peer) {
  sockaddr_storage peer{}, other{};
  if (copy_inet(reinterpret_cast<const sockaddr*>(&tcp_peer), sizeof(tcp_peer), peer) < 0 ||
      copy_inet(cm_peer, sizeof(sockaddr_storage), other) < 0 || peer.ss_family != other.ss_family)
    return false;
  if (peer.ss_family == AF_INET6)
    return memcmp(&reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr,
                  &reinterpret_cast<const sockaddr_in6&>(other).sin6_addr, sizeof(in6_addr)) == 0;
  return reinterpret_cast<const sockaddr_in&>(peer).sin_addr.s_addr ==
         reinterpret_cast<const sockaddr_in&>(other).sin_addr.s_addr;
}

}  // namespace qpsock::upgrade
