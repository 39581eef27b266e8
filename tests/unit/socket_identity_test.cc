// Reading a connection's socket under the number the application holds it by
// now (upgrade/socket_identity.h): what the upgrade checks before it takes
// the connection.
#include "upgrade/socket_identity.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>

#include "common/unique_fd.h"
#include "support/loopback_tcp_connection.h"
#include "upgrade/connection.h"
#include "upgrade/connection_registry.h"

namespace qpsock::upgrade {
namespace {

// Registry slots (the real fds are moved there) no other test uses.
constexpr int kFirstFd = 770;

// `fd` moved to the lowest free number at or above `lowest`.
UniqueFd moved_to(int fd, int lowest) {
  UniqueFd moved(fcntl(fd, F_DUPFD_CLOEXEC, lowest));
  close(fd);
  return moved;
}

uint64_t inode_of(int fd) {
  uint64_t inode = 0;
  EXPECT_EQ(socket_inode_of_fd(fd, inode), 0);
  return inode;
}

uint16_t peer_port(const sockaddr_storage& address) {
  return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
}

uint16_t own_port(int fd) {
  sockaddr_in address{};
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  return ntohs(address.sin_port);
}

struct TcpPair {
  UniqueFd connecting, accepted;
};

void make_pair(TcpPair& pair, int lowest) {
  int connecting = -1, accepted = -1;
  ASSERT_NO_FATAL_FAILURE(testing::connect_over_loopback(connecting, accepted));
  pair.connecting = moved_to(connecting, lowest);
  pair.accepted = moved_to(accepted, lowest + 1);
  ASSERT_TRUE(pair.connecting.valid() && pair.accepted.valid());
}

TEST(SocketIdentity, ThePeerIsReadUnderTheNumberTheSocketHasNow) {
  TcpPair pair;
  ASSERT_NO_FATAL_FAILURE(make_pair(pair, kFirstFd));
  auto connection = std::make_shared<Connection>(config::Role::server);
  // Offered at one number, renumbered since (a shell's exec 3<>/dev/tcp).
  UniqueFd renumbered(fcntl(pair.accepted.get(), F_DUPFD_CLOEXEC, kFirstFd + 5));
  attach_connection(renumbered.get(), connection);
  int tcp_fd = pair.accepted.get();
  sockaddr_storage peer{};
  EXPECT_EQ(current_peer_address(*connection, tcp_fd, inode_of(pair.accepted.get()), peer), 0);
  EXPECT_EQ(tcp_fd, renumbered.get());
  EXPECT_EQ(peer_port(peer), own_port(pair.connecting.get()));
  detach_connection(renumbered.get());
}

TEST(SocketIdentity, ANumberThatNamesAnotherSocketNowIsNotRead) {
  TcpPair ours, other;
  ASSERT_NO_FATAL_FAILURE(make_pair(ours, kFirstFd + 10));
  ASSERT_NO_FATAL_FAILURE(make_pair(other, kFirstFd + 12));
  auto connection = std::make_shared<Connection>(config::Role::server);
  // The only number the registry has for the connection names another
  // socket by the time it is read (the shell put its own fd back).
  attach_connection(other.accepted.get(), connection);
  int tcp_fd = other.accepted.get();
  sockaddr_storage peer{};
  EXPECT_EQ(current_peer_address(*connection, tcp_fd, inode_of(ours.accepted.get()), peer),
            -ENOTCONN)
      << "read the peer of another socket (port " << peer_port(peer) << ")";
  detach_connection(other.accepted.get());
}

TEST(SocketIdentity, ASocketWithoutPeerIsNotConnected) {
  UniqueFd unconnected = moved_to(socket(AF_INET, SOCK_STREAM, 0), kFirstFd + 20);
  ASSERT_TRUE(unconnected.valid());
  auto connection = std::make_shared<Connection>(config::Role::client);
  attach_connection(unconnected.get(), connection);
  int tcp_fd = unconnected.get();
  sockaddr_storage peer{};
  EXPECT_EQ(current_peer_address(*connection, tcp_fd, inode_of(unconnected.get()), peer),
            -ENOTCONN);
  detach_connection(unconnected.get());
}

}  // namespace
}  // namespace qpsock::upgrade
