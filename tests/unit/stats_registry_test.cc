// The statistics registry (src/stats/registry.h): slots, handles and
// generations, byte counters, paths and reasons, references, a full table.
#include "stats/registry.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include "stats_test_support.h"

namespace qpsock::stats {
namespace {

using testing::as_sockaddr;
using testing::ipv4;
using testing::TemporaryDirectory;

std::string reason_of(const format::Slot& slot) {
  char text[sizeof(slot.reason)];
  format::read_reason(slot, text, sizeof(text));
  return text;
}

class StatsRegistry : public ::testing::Test {
 protected:
  Handle open_one(Path path = Path::kernel, const char* reason = "rule 1 (test.conf:1): kernel") {
    const sockaddr_in local = ipv4("127.0.0.1", 40000), peer = ipv4("10.1.2.3", 5201);
    return registry_.open(as_sockaddr(local), as_sockaddr(peer), Role::client, path,
                          "rule 1 (test.conf:1): kernel", reason);
  }

  TemporaryDirectory directory_;
  Registry registry_{directory_.path(), 8};
};

TEST_F(StatsRegistry, NoFileUntilTheFirstConnection) {
  EXPECT_TRUE(directory_.files().empty());
  EXPECT_STREQ(registry_.file_path(), "");
  EXPECT_NE(open_one(), 0u);
  EXPECT_EQ(directory_.files().size(), 1u);
}

TEST_F(StatsRegistry, OpenRecordsTheConnection) {
  const Handle handle = open_one();
  const format::Slot* slot = registry_.find(handle);
  ASSERT_NE(slot, nullptr);
  EXPECT_EQ(slot->local_family, AF_INET);
  EXPECT_EQ(slot->local_port, 40000);
  EXPECT_EQ(slot->peer_port, 5201);
  const uint8_t peer_bytes[4] = {10, 1, 2, 3};
  EXPECT_EQ(memcmp(slot->peer_address, peer_bytes, 4), 0);
  EXPECT_EQ(slot->role, static_cast<uint8_t>(Role::client));
  EXPECT_EQ(registry_.path(handle), Path::kernel);
  EXPECT_STREQ(slot->decision, "rule 1 (test.conf:1): kernel");
  EXPECT_EQ(reason_of(*slot), "rule 1 (test.conf:1): kernel");
  EXPECT_EQ(slot->users[0].load(), getpid());
}

TEST_F(StatsRegistry, CountsBytesPerDirectionAndPathFamily) {
  const Handle handle = open_one();
  registry_.add_bytes(handle, Direction::sent, Path::kernel, 100);
  registry_.add_bytes(handle, Direction::sent, Path::shm, 7);
  registry_.add_bytes(handle, Direction::received, Path::kernel, 3);
  registry_.add_bytes(handle, Direction::received, Path::rdma, 5);
  const format::Slot* slot = registry_.find(handle);
  EXPECT_EQ(slot->bytes[format::kSent][format::kTcp].load(), 100u);
  EXPECT_EQ(slot->bytes[format::kSent][format::kOffloaded].load(), 7u);
  EXPECT_EQ(slot->bytes[format::kReceived][format::kTcp].load(), 3u);
  EXPECT_EQ(slot->bytes[format::kReceived][format::kOffloaded].load(), 5u);
}

TEST_F(StatsRegistry, CountsZeroCopyBytesPerDirection) {
  const Handle handle = open_one();
  registry_.add_bytes(handle, Direction::sent, Path::rdma, 3 << 20);
  registry_.add_zero_copy(handle, Direction::sent, 2 << 20);
  registry_.add_zero_copy(handle, Direction::sent, 1 << 20);
  const format::Slot* slot = registry_.find(handle);
  EXPECT_EQ(slot->zero_copy_bytes[format::kSent].load(), 3u << 20);
  EXPECT_EQ(slot->zero_copy_bytes[format::kReceived].load(), 0u);
  registry_.add_zero_copy(0, Direction::received, 1);  // not recorded: ignored
}

TEST_F(StatsRegistry, SetPathChangesPathAndReason) {
  const Handle handle = open_one(Path::pending, "upgrade pending");
  registry_.set_path(handle, Path::shm, "upgraded to shared memory");
  EXPECT_EQ(registry_.path(handle), Path::shm);
  EXPECT_EQ(reason_of(*registry_.find(handle)), "upgraded to shared memory");
}

TEST_F(StatsRegistry, SettlePendingOnlyOnce) {
  const Handle handle = open_one(Path::pending, "upgrade pending");
  EXPECT_TRUE(registry_.settle_pending(handle, Path::kernel, "not upgraded"));
  EXPECT_FALSE(registry_.settle_pending(handle, Path::shm, "too late"));
  EXPECT_EQ(registry_.path(handle), Path::kernel);
  EXPECT_EQ(reason_of(*registry_.find(handle)), "not upgraded");
}

TEST_F(StatsRegistry, LongReasonIsTruncatedAndTerminated) {
  const std::string long_reason(500, 'x');
  const Handle handle = open_one(Path::kernel, long_reason.c_str());
  EXPECT_EQ(reason_of(*registry_.find(handle)), std::string(sizeof(format::Slot::reason) - 1, 'x'));
}

TEST_F(StatsRegistry, StaleHandleFindsNothingAfterTheSlotIsReused) {
  const Handle first = open_one();
  registry_.add_zero_copy(first, Direction::received, 77);
  registry_.close(first);
  EXPECT_EQ(registry_.find(first), nullptr);
  // Fill every slot, so one of them is the first one again, with a new generation.
  std::vector<Handle> handles;
  for (int index = 0; index < 8; ++index) handles.push_back(open_one());
  bool reused = false;
  for (Handle handle : handles) reused |= handle_index(handle) == handle_index(first);
  EXPECT_TRUE(reused);
  registry_.add_bytes(first, Direction::sent, Path::kernel, 999);
  registry_.set_path(first, Path::shm, "stale");
  for (Handle handle : handles) {
    EXPECT_EQ(registry_.find(handle)->bytes[format::kSent][format::kTcp].load(), 0u);
    EXPECT_EQ(registry_.find(handle)->zero_copy_bytes[format::kReceived].load(), 0u);
    EXPECT_EQ(registry_.path(handle), Path::kernel);
  }
}

TEST_F(StatsRegistry, InvalidHandlesAreIgnored) {
  open_one();
  for (Handle handle : {Handle{0}, Handle{~0ull}, Handle{1} << 61 | Handle{0xffff} << 32}) {
    EXPECT_EQ(registry_.find(handle), nullptr);
    registry_.add_bytes(handle, Direction::sent, Path::kernel, 1);
    registry_.set_path(handle, Path::shm, "x");
    registry_.add_reference(handle);
    registry_.close(handle);
  }
}

TEST_F(StatsRegistry, FreedSlotIsReusedFirstAndItsOldHandleFindsNothing) {
  // Connections that come and go keep to the same few slots (pages touched,
  // rows scanned); the generation tells the new row from the old.
  const Handle other = open_one();
  const Handle first = open_one();
  registry_.close(first);
  const Handle second = open_one();
  EXPECT_EQ(handle_index(second), handle_index(first));
  EXPECT_NE(second, first);
  EXPECT_EQ(registry_.find(first), nullptr);
  EXPECT_NE(registry_.find(second), nullptr);
  EXPECT_NE(registry_.find(other), nullptr);
}

TEST_F(StatsRegistry, FullTableDropsNewConnectionsAndCountsThem) {
  std::vector<Handle> handles;
  for (int index = 0; index < 8; ++index) handles.push_back(open_one());
  for (Handle handle : handles) EXPECT_NE(handle, 0u);
  const int saved_errno = errno = 1234;
  EXPECT_EQ(open_one(), 0u);
  EXPECT_EQ(open_one(), 0u);
  EXPECT_EQ(errno, saved_errno);
  const format::FileHeader* header = registry_.header();
  ASSERT_NE(header, nullptr);
  EXPECT_EQ(header->dropped.load(), 2u);
  registry_.close(handles[3]);
  EXPECT_NE(open_one(), 0u);
}

TEST_F(StatsRegistry, EveryReferenceMustCloseBeforeTheSlotIsFreed) {
  const Handle handle = open_one();
  registry_.add_reference(handle);  // dup
  registry_.close(handle);
  EXPECT_NE(registry_.find(handle), nullptr);
  registry_.close(handle);
  EXPECT_EQ(registry_.find(handle), nullptr);
  registry_.close(handle);  // one close too many: nothing happens
}

TEST_F(StatsRegistry, ReleaseAllFreesEverythingAndRemovesTheFile) {
  open_one();
  open_one();
  ASSERT_EQ(directory_.files().size(), 1u);
  registry_.release_all();
  EXPECT_TRUE(directory_.files().empty());
  // No new file afterwards (the process is exiting or exec'ing).
  EXPECT_EQ(open_one(), 0u);
  EXPECT_TRUE(directory_.files().empty());
}

TEST(StatsRegistryDefault, AProcessRecordsTenThousandConnectionsAtOnce) {
  TemporaryDirectory directory;
  Registry registry(directory.path(), format::kDefaultSlotCount);
  const sockaddr_in local = ipv4("127.0.0.1", 40000), peer = ipv4("127.0.0.1", 5201);
  std::vector<Handle> handles;
  for (int index = 0; index < 10'000; ++index) {
    handles.push_back(registry.open(as_sockaddr(local), as_sockaddr(peer), Role::server,
                                    Path::shm, "", ""));
    ASSERT_NE(handles.back(), 0u) << "connection " << index;
  }
  EXPECT_EQ(registry.header()->dropped.load(), 0u);
  for (Handle handle : handles) {
    EXPECT_NE(registry.find(handle), nullptr);
    registry.close(handle);
    EXPECT_EQ(registry.find(handle), nullptr);
  }
}

TEST(StatsRegistryDirectory, MissingDirectoryMeansNoRecordsNotFailure) {
  Registry registry("/nonexistent/qpsock-stats", 8);
  const sockaddr_in address = ipv4("127.0.0.1", 1);
  errno = 77;
  EXPECT_EQ(registry.open(as_sockaddr(address), as_sockaddr(address), Role::server, Path::kernel, "", ""), 0u);
  EXPECT_EQ(errno, 77);
}

}  // namespace
}  // namespace qpsock::stats
