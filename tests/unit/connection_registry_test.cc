// The registry of fds that have a Connection: what dup, close and exec rely on.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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

// An accepted connection is offered with no Connection until a process
// does I/O on it (offer_unclaimed, claim_offer).
TEST(ConnectionRegistry, AnOfferHasNoConnectionUntilItIsClaimedOnce) {
  const int fd = kFirstFd + 40;
  EXPECT_EQ(offer_unclaimed(fd), nullptr);
  EXPECT_TRUE(any_offers());
  EXPECT_EQ(find_connection(fd), nullptr) << "an offer is no Connection";
  int prepared = 0;
  ConnectionHold claimed = claim_offer(fd, [&](Connection& connection) {
    ++prepared;
    EXPECT_EQ(connection.role(), config::Role::server);
  });
  ASSERT_TRUE(claimed);
  EXPECT_EQ(prepared, 1);
  EXPECT_EQ(find_connection(fd).get(), &*claimed);
  EXPECT_EQ(claimed->attached_fds(), 1u);
  // Claimed already: the same Connection, not prepared again.
  ConnectionHold again = claim_offer(fd, [&](Connection&) { ++prepared; });
  EXPECT_EQ(&*again, &*claimed);
  EXPECT_EQ(prepared, 1);
  std::shared_ptr<Connection> detached = detach_connection(fd);
  EXPECT_EQ(detached.get(), &*claimed);
  EXPECT_FALSE(connection_in_use(detached.get()));
}

TEST(ConnectionRegistry, AClosedOfferLeavesNothingToClaim) {
  const int fd = kFirstFd + 41;
  offer_unclaimed(fd);
  EXPECT_EQ(detach_connection(fd), nullptr);
  EXPECT_FALSE(claim_offer(fd, [](Connection&) {}));
  EXPECT_EQ(find_connection(fd), nullptr);
}

TEST(ConnectionRegistry, EveryOfferOfABurstIsClaimedAndEachHasItsOwnConnection) {
  constexpr int kBurst = 40;
  const int first = kFirstFd + 50;
  for (int index = 0; index < kBurst; ++index) offer_unclaimed(first + index);
  std::vector<Connection*> seen;
  for (int index = 0; index < kBurst; ++index) {
    ConnectionHold claimed = claim_offer(first + index, [](Connection&) {});
    ASSERT_TRUE(claimed) << "offer " << index << " had no Connection ready";
    seen.push_back(&*claimed);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end());
  for (int index = 0; index < kBurst; ++index) detach_connection(first + index);
}

TEST(ConnectionRegistry, AttachingOverAnOfferReplacesIt) {
  const int fd = kFirstFd + 42;
  offer_unclaimed(fd);
  auto connection = make_connection();
  EXPECT_EQ(attach_connection(fd, connection), nullptr);
  EXPECT_EQ(find_connection(fd), connection);
  detach_connection(fd);
}

// A forking server's child claims the offer it inherited; the parent's
// stays unclaimed.
TEST(ConnectionRegistry, AForkedChildClaimsAnInheritedOfferAndTheParentsStaysAnOffer) {
  const int fd = kFirstFd + 43;
  offer_unclaimed(fd);
  const pid_t child = fork();
  if (child == 0) {
    ConnectionHold claimed = claim_offer(fd, [](Connection&) {});
    _exit(claimed && find_connection(fd).get() == &*claimed ? 0 : 1);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(find_connection(fd), nullptr);
  EXPECT_TRUE(claim_offer(fd, [](Connection&) {}));
  detach_connection(fd);
}

}  // namespace
}  // namespace qpsock::upgrade
