// The socket entry points keep the fd table in step with the kernel.
#include "sockets/socket_lifecycle.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>

#include "sockets/fd_table.h"

namespace qpsock::sockets {
namespace {

FdRecord record_of(int fd) { return FdTable::process_table().lookup(fd); }

TEST(SocketLifecycle, OnlyTcpSocketsAreTracked) {
  int tcp4 = sockets::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int tcp6 = sockets::socket(AF_INET6, SOCK_STREAM, IPPROTO_TCP);
  int udp = sockets::socket(AF_INET, SOCK_DGRAM, 0);
  int unix_stream = sockets::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(tcp4, 0);
  ASSERT_GE(tcp6, 0);
  EXPECT_TRUE(record_of(tcp4).tracked());
  EXPECT_EQ(record_of(tcp4).family, AF_INET);
  EXPECT_TRUE(record_of(tcp6).tracked());
  EXPECT_EQ(record_of(tcp6).family, AF_INET6);
  EXPECT_FALSE(record_of(udp).tracked());
  EXPECT_FALSE(record_of(unix_stream).tracked());
  for (int fd : {tcp4, tcp6, udp, unix_stream}) EXPECT_EQ(sockets::close(fd), 0);
  EXPECT_FALSE(record_of(tcp4).tracked());
}

TEST(SocketLifecycle, DuplicatesFollowTheSocket) {
  int fd = sockets::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  int duplicate = sockets::dup(fd);
  int above = sockets::fcntl(fd, F_DUPFD_CLOEXEC, 100);
  ASSERT_GE(above, 100);
  EXPECT_EQ(record_of(duplicate), record_of(fd));
  EXPECT_EQ(record_of(above), record_of(fd));
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  // dup2 of a plain fd over the socket's copy: that number is no socket any more.
  ASSERT_EQ(sockets::dup2(pipe_fds[0], duplicate), duplicate);
  EXPECT_FALSE(record_of(duplicate).tracked());
  EXPECT_TRUE(record_of(fd).tracked());
  ASSERT_EQ(sockets::dup3(fd, pipe_fds[1], O_CLOEXEC), pipe_fds[1]);
  EXPECT_EQ(record_of(pipe_fds[1]), record_of(fd));
  for (int each : {fd, duplicate, above, pipe_fds[0], pipe_fds[1]}) sockets::close(each);
}

TEST(SocketLifecycle, AcceptedConnectionsOfATrackedListenerAreTracked) {
  int listener = sockets::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(sockets::bind(listener, reinterpret_cast<sockaddr*>(&address), length), 0);
  ASSERT_EQ(sockets::listen(listener, 4), 0);
  ASSERT_EQ(sockets::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  int client = sockets::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(sockets::connect(client, reinterpret_cast<sockaddr*>(&address), length), 0);
  int accepted = sockets::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(accepted, 0);
  EXPECT_TRUE(record_of(accepted).tracked());
  EXPECT_NE(record_of(accepted).generation, record_of(listener).generation);
  for (int fd : {listener, client, accepted}) sockets::close(fd);
}

TEST(SocketLifecycle, FailedCallsKeepTheKernelsErrno) {
  errno = 0;
  EXPECT_EQ(sockets::socket(12345, SOCK_STREAM, 0), -1);
  EXPECT_EQ(errno, EAFNOSUPPORT);
  errno = 0;
  EXPECT_EQ(sockets::close(-1), -1);
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(sockets::dup2(-1, 5), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(SocketLifecycle, SuccessfulCallsLeaveErrnoAlone) {
  errno = 4242;
  int fd = sockets::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  int duplicate = sockets::dup(fd);
  sockets::close(duplicate);
  sockets::close(fd);
  EXPECT_EQ(errno, 4242);
}

}  // namespace
}  // namespace qpsock::sockets
