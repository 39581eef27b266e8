// The registry of fds that have a Connection: what dup, close and exec rely on.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "upgrade/connection_registry.h"

namespace qpsock::upgrade {
namespace {

// fd numbers no other test uses (the registry is the process's).
constexpr int kFirstFd = 700;

std::shared_ptr<Connection> make_connection() {
  return std::make_shared<Connection>(config::Role::client);
}

TEST(ConnectionRegistry, FindsWhatWasAttachedUntilItIsDetached) {
  auto connection = make_connection();
  attach_connection(kFirstFd, connection);
  EXPECT_TRUE(any_connections());
  EXPECT_EQ(find_connection(kFirstFd), connection);
  EXPECT_EQ(find_connection(kFirstFd + 1), nullptr);
  EXPECT_EQ(detach_connection(kFirstFd), connection);
  EXPECT_EQ(find_connection(kFirstFd), nullptr);
  EXPECT_EQ(detach_connection(kFirstFd), nullptr);
  EXPECT_EQ(connection.use_count(), 1) << "the registry kept a reference";
}

TEST(ConnectionRegistry, DupSharesTheConnectionAndTheLastCloseEndsItsUse) {
  auto connection = make_connection();
  attach_connection(kFirstFd, connection);
  copy_connection(kFirstFd, kFirstFd + 1);
  EXPECT_EQ(find_connection(kFirstFd + 1), connection);
  EXPECT_EQ(connection->attached_fds(), 2u);
  detach_connection(kFirstFd);
  EXPECT_TRUE(connection_in_use(connection.get()));
  detach_connection(kFirstFd + 1);
  EXPECT_FALSE(connection_in_use(connection.get()));
}

TEST(ConnectionRegistry, DupOfAnFdWithoutConnectionClearsTheDestination) {
  auto connection = make_connection();
  attach_connection(kFirstFd + 2, connection);
  copy_connection(kFirstFd + 3, kFirstFd + 2);  // dup2(plain fd, upgraded fd)
  EXPECT_EQ(find_connection(kFirstFd + 2), nullptr);
  EXPECT_FALSE(connection_in_use(connection.get()));
}

TEST(ConnectionRegistry, AttachingOverAnFdReplacesItsConnection) {
  auto first = make_connection();
  auto second = make_connection();
  attach_connection(kFirstFd + 4, first);
  attach_connection(kFirstFd + 4, second);
  EXPECT_EQ(find_connection(kFirstFd + 4), second);
  EXPECT_FALSE(connection_in_use(first.get()));
  EXPECT_EQ(first.use_count(), 1);
  detach_connection(kFirstFd + 4);
}

TEST(ConnectionRegistry, Dup2OverAnotherConnectionReportsTheOneItDisplaced) {
  auto moved = make_connection();
  auto displaced = make_connection();
  attach_connection(kFirstFd + 20, moved);
  attach_connection(kFirstFd + 21, displaced);
  attach_connection(kFirstFd + 22, displaced);
  EXPECT_EQ(copy_connection(kFirstFd + 20, kFirstFd + 21), displaced);
  EXPECT_EQ(find_connection(kFirstFd + 21), moved);
  EXPECT_EQ(displaced->attached_fds(), 1u);
  // Onto an fd of the same connection, or a plain one: nothing displaced.
  EXPECT_EQ(copy_connection(kFirstFd + 20, kFirstFd + 21), nullptr);
  EXPECT_EQ(copy_connection(kFirstFd + 20, kFirstFd + 23), nullptr);
  for (int fd = kFirstFd + 20; fd <= kFirstFd + 23; ++fd) detach_connection(fd);
}

TEST(ConnectionRegistry, FindsAnotherFdOfAConnectionOnceItsFirstNumberWent) {
  // A shell's `exec 3<>/dev/tcp/...`: connect on one number, dup2 to another, close the first.
  auto connection = make_connection();
  attach_connection(kFirstFd + 31, connection);
  EXPECT_EQ(attached_fd(connection.get(), kFirstFd + 31), kFirstFd + 31);
  copy_connection(kFirstFd + 31, kFirstFd + 30);
  EXPECT_EQ(attached_fd(connection.get(), kFirstFd + 31), kFirstFd + 31) << "the preferred fd first";
  detach_connection(kFirstFd + 31);
  EXPECT_EQ(attached_fd(connection.get(), kFirstFd + 31), kFirstFd + 30);
  detach_connection(kFirstFd + 30);
  EXPECT_EQ(attached_fd(connection.get(), kFirstFd + 31), -1);
}

TEST(ConnectionRegistry, VisitsEveryFdThatHasAConnection) {
  auto connection = make_connection();
  attach_connection(kFirstFd + 5, connection);
  attach_connection(kFirstFd + 7, connection);
  static std::vector<int> visited;
  visited.clear();
  visit_connections([](int fd, Connection&) {
    if (fd >= kFirstFd && fd < kFirstFd + 100) visited.push_back(fd);
  });
  EXPECT_EQ(visited, (std::vector<int>{kFirstFd + 5, kFirstFd + 7}));
  detach_connection(kFirstFd + 5);
  detach_connection(kFirstFd + 7);
}

TEST(ConnectionRegistry, IgnoresFdsOutsideTheTable) {
  auto connection = make_connection();
  attach_connection(-1, connection);
  attach_connection(1 << 30, connection);
  EXPECT_EQ(find_connection(-1), nullptr);
  EXPECT_EQ(find_connection(1 << 30), nullptr);
  EXPECT_EQ(connection.use_count(), 1);
}

TEST(ConnectionRegistry, RecyclesItsHoldersWithoutMixingConnections) {
  for (int round = 0; round < 10000; ++round) {
    auto connection = make_connection();
    attach_connection(kFirstFd + 10 + round % 7, connection);
    ASSERT_EQ(find_connection(kFirstFd + 10 + round % 7), connection);
    ASSERT_EQ(detach_connection(kFirstFd + 10 + round % 7), connection);
  }
}

}  // namespace
}  // namespace qpsock::upgrade
