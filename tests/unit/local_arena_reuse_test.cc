// A link's arena given back and taken again (local_arena.h, link_pool.h):
// the next channel finds its control, registrations and inbox header as a
// fresh arena's, and a channel that published nothing leaves the
// registration table's pages untouched, at its end and at the next one's start.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <memory>

#include "transport/shm/arena_layout.h"
#include "transport/shm/link_pool.h"
#include "transport/shm/local_arena.h"
#include "transport/shm/process_page.h"
#include "transport/shm/registration_table.h"

namespace qpsock::transport::shm {
namespace {

class LocalArenaReuse : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_ = std::make_shared<OwnPool>();
    ASSERT_EQ(pool_->create(), 0);
    page_ = process_page();
    epoch_ = current_epoch();
    ASSERT_NE(page_, nullptr);
  }

  std::unique_ptr<LocalArena> take() {
    std::unique_ptr<LocalArena> arena;
    EXPECT_EQ(LocalArena::create(pool_, layout_, page_, epoch_, arena), 0);
    return arena;
  }

  // What the peer does once it has let go of the arena for good.
  static void peer_lets_go(const LocalArena& arena) {
    arena.inbox().released.store(1, std::memory_order_release);
  }

  // Whether the page holding `address` is resident (a memfd's hole is not).
  static bool resident(const void* address) {
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<uintptr_t>(address) / page * page;
    unsigned char state = 0;
    EXPECT_EQ(mincore(reinterpret_cast<void*>(begin), page, &state), 0);
    return (state & 1) != 0;
  }

  std::shared_ptr<OwnPool> pool_;
  ProcessPage* page_ = nullptr;
  uint64_t epoch_ = 0;
  const ArenaLayout layout_ = ArenaLayout::make(1024, uint64_t{1} << 20);
};

TEST_F(LocalArenaReuse, AReusedArenaStartsAsAFreshOne) {
  uint64_t offset = 0;
  {
    std::shared_ptr<LocalArena> first = take();
    ASSERT_NE(first, nullptr);
    offset = first->pool_offset();
    char buffer[64];
    RegistrationPublisher publisher(first, page_, epoch_);
    for (int i = 0; i < 3; ++i)
      ASSERT_GT(publisher.publish(buffer, sizeof(buffer), PublishedAccess::remote_read, kNotInArena), 0);
    first->control().inbox_head.store(7);
    first->inbox().tail.store(7);
    first->inbox().waiter.store(1);
    publisher.revoke_all();
    EXPECT_EQ(first->registration_slots_used(), 3u);
    peer_lets_go(*first);
  }
  std::unique_ptr<LocalArena> second = take();
  ASSERT_NE(second, nullptr);
  ASSERT_EQ(second->pool_offset(), offset) << "the arena given back is the warmest of its class";
  for (uint32_t slot = 0; slot < 3; ++slot) {
    const RegistrationEntry& entry = second->registrations()[slot];
    EXPECT_EQ(entry.key.load(), 0u);
    EXPECT_EQ(entry.access.load(), 0u);
    EXPECT_EQ(entry.address.load(), 0u);
    EXPECT_EQ(entry.length.load(), 0u);
    EXPECT_EQ(entry.arena_offset.load(), 0u);
  }
  EXPECT_EQ(second->control().inbox_head.load(), 0u);
  EXPECT_EQ(second->control().closed.load(), 0u);
  EXPECT_EQ(second->inbox().tail.load(), 0u);
  EXPECT_EQ(second->inbox().waiter.load(), 0u);
  EXPECT_EQ(second->inbox().released.load(), 0u);
  EXPECT_EQ(second->control().magic, kArenaMagic);
  EXPECT_EQ(second->registration_slots_used(), 0u);
}

TEST_F(LocalArenaReuse, AChannelThatNeverRegisteredLeavesTheTablesLaterPagesUntouched) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // The table's entries past the first page (8 KiB of them: two pages more).
  const size_t past_first_page = (page - kRegistrationTableOffset) / sizeof(RegistrationEntry) + 1;
  ASSERT_LT(past_first_page, kRegistrationSlots);
  uint64_t offset = 0;
  {
    std::shared_ptr<LocalArena> first = take();
    ASSERT_NE(first, nullptr);
    offset = first->pool_offset();
    RegistrationPublisher publisher(first, page_, epoch_);
    publisher.revoke_all();
    EXPECT_FALSE(resident(&first->registrations()[past_first_page]));
    EXPECT_FALSE(resident(&first->registrations()[kRegistrationSlots - 1]));
    peer_lets_go(*first);
  }
  std::unique_ptr<LocalArena> second = take();
  ASSERT_NE(second, nullptr);
  ASSERT_EQ(second->pool_offset(), offset);
  EXPECT_FALSE(resident(&second->registrations()[past_first_page]));
  EXPECT_FALSE(resident(&second->registrations()[kRegistrationSlots - 1]));
  // And a slot published there later is found as any other.
  char buffer[64];
  std::shared_ptr<LocalArena> shared(std::move(second));
  RegistrationPublisher publisher(shared, page_, epoch_);
  EXPECT_GT(publisher.publish(buffer, sizeof(buffer), PublishedAccess::remote_read, kNotInArena), 0);
}

}  // namespace
}  // namespace qpsock::transport::shm
