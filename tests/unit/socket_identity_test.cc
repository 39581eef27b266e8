// Reading a connection's socket under the number the application holds it by
// now (upgrade/socket_identity.h): what an upgrade checks before it takes the
// connection.
#include "upgrade/socket_identity.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
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

uint16_t port_of(const sockaddr_storage& address) {
  return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
}

uint16_t own_port(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  return port_of(address);
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

// The registry's entries of one Connection, removed when the test ends.
class Attached {
 public:
  explicit Attached(config::Role role) : connection_(std::make_shared<Connection>(role)) {}
  ~Attached() {
    for (int fd : fds_)
      if (find_connection(fd) == connection_) detach_connection(fd);
  }
  void at(int fd) {
    attach_connection(fd, connection_);
    ASSERT_EQ(find_connection(fd), connection_);
    fds_.push_back(fd);
  }
  const Connection& connection() const { return *connection_; }

 private:
  std::shared_ptr<Connection> connection_;
  std::vector<int> fds_;
};

int read_peer(int fd, sockaddr_storage& peer) {
  socklen_t length = sizeof(peer);
  peer = {};
  return getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) == 0 ? 0 : -errno;
}

// read_socket with a getpeername, as the server's RDMA accept reads.
int read_peer_of(const Attached& attached, int& tcp_fd, int socket_fd, sockaddr_storage& peer) {
  KeptFd kept;
  const int result = read_socket(attached.connection(), tcp_fd, inode_of(socket_fd),
                                 [&peer](int fd) { return read_peer(fd, peer); }, kept);
  if (!kept.empty()) tcp_fd = kept.fd;
  return result;
}

TEST(SocketIdentity, TheSocketIsReadUnderTheNumberItHasNow) {
  TcpPair pair;
  ASSERT_NO_FATAL_FAILURE(make_pair(pair, kFirstFd));
  Attached attached(config::Role::server);
  // Offered at one number, renumbered since (a shell's exec 3<>/dev/tcp).
  UniqueFd renumbered(fcntl(pair.accepted.get(), F_DUPFD_CLOEXEC, kFirstFd + 5));
  ASSERT_NO_FATAL_FAILURE(attached.at(renumbered.get()));
  int tcp_fd = pair.accepted.get();
  sockaddr_storage peer{};
  EXPECT_EQ(read_peer_of(attached, tcp_fd, pair.accepted.get(), peer), 0);
  EXPECT_EQ(tcp_fd, renumbered.get());
  EXPECT_EQ(port_of(peer), own_port(pair.connecting.get()));
}

TEST(SocketIdentity, ANumberThatNamesAnotherSocketIsPassedOver) {
  TcpPair ours, other;
  ASSERT_NO_FATAL_FAILURE(make_pair(other, kFirstFd + 10));
  ASSERT_NO_FATAL_FAILURE(make_pair(ours, kFirstFd + 12));
  Attached attached(config::Role::server);
  // The lower number still in the registry names another socket by now
  // (the registry follows a dup2 only after its system call).
  ASSERT_NO_FATAL_FAILURE(attached.at(other.accepted.get()));
  ASSERT_NO_FATAL_FAILURE(attached.at(ours.accepted.get()));
  int tcp_fd = other.accepted.get();
  sockaddr_storage peer{};
  EXPECT_EQ(read_peer_of(attached, tcp_fd, ours.accepted.get(), peer), 0);
  EXPECT_EQ(tcp_fd, ours.accepted.get());
  EXPECT_EQ(port_of(peer), own_port(ours.connecting.get()));
}

TEST(SocketIdentity, AReadWhoseNumberMovedUnderItIsNotTrusted) {
  TcpPair ours, other;
  ASSERT_NO_FATAL_FAILURE(make_pair(ours, kFirstFd + 20));
  ASSERT_NO_FATAL_FAILURE(make_pair(other, kFirstFd + 22));
  Attached attached(config::Role::server);
  // The socket at two numbers; while the lower one is read, another socket
  // is dup2'ed over it (a shell's `printf ... >&3` putting fd 1 back).
  UniqueFd lower(fcntl(ours.accepted.get(), F_DUPFD_CLOEXEC, kFirstFd + 18));
  ASSERT_LT(lower.get(), ours.accepted.get());
  ASSERT_NO_FATAL_FAILURE(attached.at(lower.get()));
  ASSERT_NO_FATAL_FAILURE(attached.at(ours.accepted.get()));
  int tcp_fd = lower.get();
  int reads = 0;
  sockaddr_storage peer{};
  KeptFd kept;
  EXPECT_EQ(read_socket(attached.connection(), tcp_fd, inode_of(ours.accepted.get()),
                        [&](int fd) {
                          ++reads;
                          if (fd == lower.get()) dup2(other.accepted.get(), fd);
                          return read_peer(fd, peer);
                        }, kept),
            0);
  EXPECT_EQ(reads, 2);
  EXPECT_EQ(kept.fd, ours.accepted.get());
  EXPECT_EQ(port_of(peer), own_port(ours.connecting.get()))
      << "trusted the peer read through a number that named another socket by then";
}

TEST(SocketIdentity, AConnectionAtNoNumberThatIsItsSocketIsGone) {
  TcpPair ours, other;
  ASSERT_NO_FATAL_FAILURE(make_pair(ours, kFirstFd + 30));
  ASSERT_NO_FATAL_FAILURE(make_pair(other, kFirstFd + 32));
  Attached attached(config::Role::server);
  ASSERT_NO_FATAL_FAILURE(attached.at(other.accepted.get()));
  int tcp_fd = other.accepted.get();
  int reads = 0;
  KeptFd kept;
  EXPECT_EQ(read_socket(attached.connection(), tcp_fd, inode_of(ours.accepted.get()),
                        [&reads](int) { return ++reads, 0; }, kept),
            -ENOTCONN);
  EXPECT_EQ(reads, 0) << "read a socket that is not the connection's";
}

TEST(SocketIdentity, ASocketWithoutPeerReadsAsNotConnected) {
  UniqueFd unconnected = moved_to(socket(AF_INET, SOCK_STREAM, 0), kFirstFd + 40);
  ASSERT_TRUE(unconnected.valid());
  Attached attached(config::Role::client);
  ASSERT_NO_FATAL_FAILURE(attached.at(unconnected.get()));
  int tcp_fd = kFirstFd + 45;  // a stale number
  sockaddr_storage peer{};
  EXPECT_EQ(read_peer_of(attached, tcp_fd, unconnected.get(), peer), -ENOTCONN);
  EXPECT_EQ(tcp_fd, unconnected.get()) << "the answer came from the socket itself";
}

}  // namespace
}  // namespace qpsock::upgrade

// The handshake's check that the peer process holds the connection's other
// end: the fd the peer names is looked at first, and a wrong or missing name
// still finds the socket by reading every fd.
namespace qpsock::upgrade {
namespace {

TEST(ProcessHoldsSocket, TheNamedFdOrAnyFdOfTheProcessHoldsIt) {
  TcpPair pair;
  ASSERT_NO_FATAL_FAILURE(make_pair(pair, kFirstFd + 40));
  const uint64_t inode = inode_of(pair.accepted.get());
  EXPECT_TRUE(process_holds_socket(getpid(), inode, pair.accepted.get()));
  EXPECT_TRUE(process_holds_socket(getpid(), inode, pair.connecting.get()));  // another socket's fd
  EXPECT_TRUE(process_holds_socket(getpid(), inode, 1 << 20));               // no such fd
  EXPECT_TRUE(process_holds_socket(getpid(), inode));
}

TEST(ProcessHoldsSocket, ASocketTheProcessDoesNotHoldIsNotFoundUnderAnyName) {
  TcpPair pair;
  ASSERT_NO_FATAL_FAILURE(make_pair(pair, kFirstFd + 44));
  const uint64_t inode = inode_of(pair.accepted.get());
  const int number = pair.accepted.get();
  pair.accepted.reset();
  EXPECT_FALSE(process_holds_socket(getpid(), inode, number));
  EXPECT_FALSE(process_holds_socket(getpid(), inode));
}

}  // namespace
}  // namespace qpsock::upgrade

// The server's look for its client's socket by the connection's addresses:
// found while the client holds it; once the client closed it, known to be
// here but held by no one, so the server does not take the client for one
// on another host.
namespace qpsock::upgrade {
namespace {

int peer_inode_by_addresses(int fd, uint64_t& inode) {
  sockaddr_storage local{}, remote{};
  socklen_t length = sizeof(local);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length), 0);
  length = sizeof(remote);
  EXPECT_EQ(getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &length), 0);
  return find_tcp_socket_inode(remote, local, inode);
}

TEST(FindTcpSocketInode, ThePeersSocketIsFoundWhileItIsHeld) {
  TcpPair pair;
  ASSERT_NO_FATAL_FAILURE(make_pair(pair, kFirstFd + 48));
  uint64_t inode = 0;
  EXPECT_EQ(peer_inode_by_addresses(pair.accepted.get(), inode), 0);
  EXPECT_EQ(inode, inode_of(pair.connecting.get()));
}

TEST(FindTcpSocketInode, APeerSocketClosedReadsAsHereButHeldByNoOne) {
  TcpPair pair;
  ASSERT_NO_FATAL_FAILURE(make_pair(pair, kFirstFd + 52));
  pair.connecting.reset();
  uint64_t inode = 0;
  EXPECT_EQ(peer_inode_by_addresses(pair.accepted.get(), inode), -EPIPE);
  EXPECT_EQ(inode, 0u);
}

TEST(FindTcpSocketInode, NoSuchSocketReadsAsNotHere) {
  TcpPair pair;
  ASSERT_NO_FATAL_FAILURE(make_pair(pair, kFirstFd + 56));
  sockaddr_storage local{}, remote{};
  socklen_t length = sizeof(local);
  ASSERT_EQ(getsockname(pair.accepted.get(), reinterpret_cast<sockaddr*>(&local), &length), 0);
  length = sizeof(remote);
  ASSERT_EQ(getpeername(pair.accepted.get(), reinterpret_cast<sockaddr*>(&remote), &length), 0);
  reinterpret_cast<sockaddr_in&>(remote).sin_port = htons(1);  // no socket has this tuple
  uint64_t inode = 0;
  EXPECT_EQ(find_tcp_socket_inode(remote, local, inode), -ENOENT);
}

}  // namespace
}  // namespace qpsock::upgrade
