#include "sockets/fd_table.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>

namespace qpsock::sockets {
namespace {

TEST(FdTable, NewTableTracksNothing) {
  FdTable table(64);
  for (int fd = 0; fd < 64; ++fd) EXPECT_FALSE(table.lookup(fd).tracked());
}

TEST(FdTable, TrackLookupForget) {
  FdTable table(64);
  uint64_t generation = table.track_new(5, SocketKind::tcp, AF_INET6);
  FdRecord record = table.lookup(5);
  EXPECT_TRUE(record.tracked());
  EXPECT_EQ(record.family, AF_INET6);
  EXPECT_EQ(record.generation, generation);
  table.forget(5);
  EXPECT_FALSE(table.lookup(5).tracked());
}

TEST(FdTable, EachSocketGetsANewGeneration) {
  FdTable table(64);
  uint64_t first = table.track_new(3, SocketKind::tcp, AF_INET);
  table.forget(3);
  uint64_t second = table.track_new(3, SocketKind::tcp, AF_INET);
  EXPECT_NE(first, second);
}

TEST(FdTable, CopyMakesBothFdsReferToTheSameSocket) {
  FdTable table(64);
  table.track_new(3, SocketKind::tcp, AF_INET);
  table.copy(3, 9);
  EXPECT_EQ(table.lookup(3), table.lookup(9));
  // dup2 of an untracked fd (the JVM's placeholder) over a tracked one.
  table.copy(10, 3);
  EXPECT_FALSE(table.lookup(3).tracked());
  EXPECT_TRUE(table.lookup(9).tracked());
}

TEST(FdTable, OutOfRangeFdsAreNeverTracked) {
  FdTable table(16);
  EXPECT_EQ(table.track_new(16, SocketKind::tcp, AF_INET), 0u);
  EXPECT_EQ(table.track_new(-1, SocketKind::tcp, AF_INET), 0u);
  EXPECT_FALSE(table.lookup(16).tracked());
  EXPECT_FALSE(table.lookup(-1).tracked());
  table.forget(1 << 30);
  table.copy(1 << 30, 2);
  EXPECT_FALSE(table.lookup(2).tracked());
}

TEST(FdTable, ProcessTableIsSizedFromTheFileLimit) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  size_t capacity = FdTable::process_table().capacity();
  EXPECT_GE(capacity, 1024u);
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max <= (1u << 20)) {
    EXPECT_GE(capacity, limit.rlim_max);
  }
}

}  // namespace
}  // namespace qpsock::sockets
