// Where the two ends of an RDMA upgrade meet (upgrade/verbs_addresses.h):
// the client's listener address must be its TCP endpoint, known before the
// SYN; the server's is its connection's peer. Real sockets on loopback.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "common/unique_fd.h"
#include "upgrade/verbs_addresses.h"

namespace qpsock::upgrade {
namespace {

sockaddr_in ipv4(const char* text, uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  inet_pton(AF_INET, text, &address.sin_addr);
  return address;
}

const sockaddr* as_sockaddr(const sockaddr_in& address) {
  return reinterpret_cast<const sockaddr*>(&address);
}

uint16_t local_port(int fd) {
  sockaddr_in bound{};
  socklen_t length = sizeof(bound);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length), 0);
  return ntohs(bound.sin_port);
}

// A listening socket on 127.0.0.1, at a port the kernel picks; `address`
// says where to connect.
UniqueFd loopback_listener(sockaddr_in& address) {
  UniqueFd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const sockaddr_in any_port = ipv4("127.0.0.1", 0);
  if (bind(listener.get(), as_sockaddr(any_port), sizeof(any_port)) != 0 ||
      listen(listener.get(), 1) != 0)
    return UniqueFd();
  address = ipv4("127.0.0.1", local_port(listener.get()));
  return listener;
}

TEST(VerbsAddresses, LoopbackIsLocalAndADocumentationAddressIsNot) {
  const sockaddr_in loopback = ipv4("127.0.0.1", 80);
  const sockaddr_in elsewhere = ipv4("192.0.2.1", 80);  // TEST-NET-1
  EXPECT_TRUE(is_local_address(as_sockaddr(loopback), sizeof(loopback)));
  EXPECT_FALSE(is_local_address(as_sockaddr(elsewhere), sizeof(elsewhere)));
  EXPECT_FALSE(is_local_address(nullptr, 0));
}

TEST(VerbsAddresses, AnUnboundClientIsGivenItsPortBeforeConnect) {
  UniqueFd client(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(client.valid());
  const sockaddr_in destination = ipv4("127.0.0.1", 9);
  sockaddr_storage meeting{};
  ASSERT_EQ(client_meeting_address(client.get(), as_sockaddr(destination), sizeof(destination),
                                   meeting),
            0);
  const auto& met = reinterpret_cast<const sockaddr_in&>(meeting);
  EXPECT_EQ(met.sin_family, AF_INET);
  // The route to 127.0.0.1 leaves from 127.0.0.1; the port is the socket's own.
  EXPECT_EQ(met.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
  EXPECT_NE(ntohs(met.sin_port), 0);
  EXPECT_EQ(ntohs(met.sin_port), local_port(client.get()));
}

TEST(VerbsAddresses, ABoundClientMeetsAtItsOwnAddressAndPort) {
  UniqueFd client(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(client.valid());
  const sockaddr_in source = ipv4("127.0.0.2", 0);
  ASSERT_EQ(bind(client.get(), as_sockaddr(source), sizeof(source)), 0);
  const sockaddr_in destination = ipv4("127.0.0.1", 9);
  sockaddr_storage meeting{};
  ASSERT_EQ(client_meeting_address(client.get(), as_sockaddr(destination), sizeof(destination),
                                   meeting),
            0);
  const auto& met = reinterpret_cast<const sockaddr_in&>(meeting);
  char text[INET_ADDRSTRLEN];
  EXPECT_STREQ(inet_ntop(AF_INET, &met.sin_addr, text, sizeof(text)), "127.0.0.2");
  EXPECT_EQ(ntohs(met.sin_port), local_port(client.get()));
}

// curl --interface, haproxy's source, nginx's proxy_bind: bound to an
// address, the port left to connect(). The port is taken now (the option off
// for that bind, then back on), and connect() keeps it.
TEST(VerbsAddresses, AClientBoundWithoutAPortIsGivenOneBeforeConnect) {
  sockaddr_in server{};
  const UniqueFd listener = loopback_listener(server);
  ASSERT_TRUE(listener.valid());

  UniqueFd client(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int on = 1;
  ASSERT_EQ(setsockopt(client.get(), SOL_IP, IP_BIND_ADDRESS_NO_PORT, &on, sizeof(on)), 0);
  const sockaddr_in source = ipv4("127.0.0.2", 0);
  ASSERT_EQ(bind(client.get(), as_sockaddr(source), sizeof(source)), 0);
  ASSERT_EQ(local_port(client.get()), 0);
  sockaddr_storage meeting{};
  ASSERT_EQ(client_meeting_address(client.get(), as_sockaddr(server), sizeof(server), meeting), 0);
  const auto& met = reinterpret_cast<const sockaddr_in&>(meeting);
  char text[INET_ADDRSTRLEN];
  EXPECT_STREQ(inet_ntop(AF_INET, &met.sin_addr, text, sizeof(text)), "127.0.0.2");
  const uint16_t port = local_port(client.get());
  EXPECT_NE(port, 0);
  EXPECT_EQ(ntohs(met.sin_port), port);
  int option = 0;
  socklen_t length = sizeof(option);
  ASSERT_EQ(getsockopt(client.get(), SOL_IP, IP_BIND_ADDRESS_NO_PORT, &option, &length), 0);
  EXPECT_EQ(option, 1);
  ASSERT_EQ(connect(client.get(), as_sockaddr(server), sizeof(server)), 0);
  EXPECT_EQ(local_port(client.get()), port);
}

// With no port free for a socket alone (the ephemeral range taken by
// connections elsewhere, which connect() could still share), taking the port
// early fails: the socket must stay bound to the application's address, and
// connect() go out from it. In a network namespace of its own (a child
// process), with a range of one port.
TEST(VerbsAddresses, AFailedEarlyPortLeavesTheClientsAddressAsItWas) {
  int results[2] = {-1, -1};
  ASSERT_EQ(pipe(results), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const auto finish = [&](int code) {
      (void)!write(results[1], &code, sizeof(code));
      _exit(0);
    };
    if (unshare(CLONE_NEWNET) != 0) finish(1);  // not root: skipped
    UniqueFd control(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ifreq loopback{};
    std::strcpy(loopback.ifr_name, "lo");
    loopback.ifr_flags = IFF_UP;
    if (ioctl(control.get(), SIOCSIFFLAGS, &loopback) != 0) finish(2);
    sockaddr_in elsewhere{}, server{};
    const UniqueFd elsewhere_listener = loopback_listener(elsewhere);
    const UniqueFd listener = loopback_listener(server);
    if (!elsewhere_listener.valid() || !listener.valid()) finish(3);
    {
      // Their ports taken first: from now on one ephemeral port is left.
      std::FILE* range = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "w");
      if (range == nullptr || std::fputs("40000 40000", range) < 0 || std::fclose(range) != 0) finish(3);
    }
    const int on = 1;
    const sockaddr_in source = ipv4("127.0.0.2", 0);
    // The one ephemeral port, taken by a connection from 127.0.0.2 elsewhere.
    UniqueFd holder(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (setsockopt(holder.get(), SOL_IP, IP_BIND_ADDRESS_NO_PORT, &on, sizeof(on)) != 0 ||
        bind(holder.get(), as_sockaddr(source), sizeof(source)) != 0 ||
        connect(holder.get(), as_sockaddr(elsewhere), sizeof(elsewhere)) != 0)
      finish(4);
    UniqueFd client(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (setsockopt(client.get(), SOL_IP, IP_BIND_ADDRESS_NO_PORT, &on, sizeof(on)) != 0 ||
        bind(client.get(), as_sockaddr(source), sizeof(source)) != 0)
      finish(5);
    sockaddr_storage meeting{};
    if (client_meeting_address(client.get(), as_sockaddr(server), sizeof(server), meeting) == 0)
      finish(6);  // no port was free: it cannot have succeeded
    sockaddr_in bound{};
    socklen_t length = sizeof(bound);
    getsockname(client.get(), reinterpret_cast<sockaddr*>(&bound), &length);
    if (bound.sin_addr.s_addr != source.sin_addr.s_addr || bound.sin_port != 0) finish(7);
    int option = 0;
    length = sizeof(option);
    if (getsockopt(client.get(), SOL_IP, IP_BIND_ADDRESS_NO_PORT, &option, &length) != 0 || option != 1)
      finish(8);
    // connect() shares the port with the connection elsewhere, from the same address.
    if (connect(client.get(), as_sockaddr(server), sizeof(server)) != 0) finish(9);
    length = sizeof(bound);
    getsockname(client.get(), reinterpret_cast<sockaddr*>(&bound), &length);
    if (bound.sin_addr.s_addr != source.sin_addr.s_addr || ntohs(bound.sin_port) != 40000) finish(10);
    finish(0);
  }
  ::close(results[1]);
  int code = -1;
  const bool reported = read(results[0], &code, sizeof(code)) == sizeof(code);
  ::close(results[0]);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(reported);
  if (code == 1) GTEST_SKIP() << "no network namespace of our own (not root)";
  EXPECT_EQ(code, 0) << "the step that failed (see the test)";
}

TEST(VerbsAddresses, TheServerMeetsTheClientAtItsPeerAddress) {
  sockaddr_in server{};
  const UniqueFd listener = loopback_listener(server);
  ASSERT_TRUE(listener.valid());
  UniqueFd client(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_storage meeting{};
  ASSERT_EQ(client_meeting_address(client.get(), as_sockaddr(server), sizeof(server), meeting), 0);
  ASSERT_EQ(connect(client.get(), as_sockaddr(server), sizeof(server)), 0);
  UniqueFd accepted(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(accepted.valid());

  sockaddr_storage local{}, peer{};
  ASSERT_EQ(server_meeting_addresses(accepted.get(), local, peer), 0);
  EXPECT_EQ(std::memcmp(&peer, &meeting, sizeof(sockaddr_in)), 0);
  EXPECT_EQ(reinterpret_cast<const sockaddr_in&>(local).sin_port, 0);
  sockaddr_storage tcp_peer{};
  socklen_t length = sizeof(tcp_peer);
  ASSERT_EQ(getpeername(accepted.get(), reinterpret_cast<sockaddr*>(&tcp_peer), &length), 0);
  EXPECT_TRUE(is_tcp_peer_address(tcp_peer, reinterpret_cast<const sockaddr*>(&peer)));
  const sockaddr_in other_port = ipv4("127.0.0.1", 1);
  EXPECT_TRUE(is_tcp_peer_address(tcp_peer, as_sockaddr(other_port))) << "ports aside";
  const sockaddr_in stranger = ipv4("127.0.0.3", 1);
  EXPECT_FALSE(is_tcp_peer_address(tcp_peer, as_sockaddr(stranger)));
}

// A listener planned for later (rdma_upgrade_delay 40 ms or more) reads its
// address once connect() has bound the socket: the server's peer address,
// also for an AF_INET6 socket talking IPv4 (the mapped address comes out
// plain, as rdma_cm resolves it). No bind of its own before connect().
TEST(VerbsAddresses, AConnectedClientMeetsWhereTheServerLooks) {
  sockaddr_in server{};
  const UniqueFd listener = loopback_listener(server);
  ASSERT_TRUE(listener.valid());
  for (const int family : {AF_INET, AF_INET6}) {
    SCOPED_TRACE(family == AF_INET ? "AF_INET" : "AF_INET6, IPv4-mapped");
    UniqueFd client(socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ASSERT_TRUE(client.valid());
    if (family == AF_INET) {
      ASSERT_EQ(connect(client.get(), as_sockaddr(server), sizeof(server)), 0);
    } else {
      sockaddr_in6 mapped{};
      mapped.sin6_family = AF_INET6;
      mapped.sin6_port = server.sin_port;
      ASSERT_EQ(inet_pton(AF_INET6, "::ffff:127.0.0.1", &mapped.sin6_addr), 1);
      ASSERT_EQ(connect(client.get(), reinterpret_cast<const sockaddr*>(&mapped), sizeof(mapped)), 0);
    }
    UniqueFd accepted(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    ASSERT_TRUE(accepted.valid());
    sockaddr_storage meeting{};
    ASSERT_EQ(connected_meeting_address(client.get(), meeting), 0);
    sockaddr_storage local{}, peer{};
    ASSERT_EQ(server_meeting_addresses(accepted.get(), local, peer), 0);
    EXPECT_EQ(meeting.ss_family, AF_INET);
    EXPECT_EQ(std::memcmp(&peer, &meeting, sizeof(sockaddr_in)), 0);
  }
}

}  // namespace
}  // namespace qpsock::upgrade
