// The shm transport's completion queue: first in, first out across its
// growth and its wrap, full only at the send queue depth.
#include "transport/shm/completion_queue.h"

#include <gtest/gtest.h>

#include <array>

namespace qpsock::transport::shm {
namespace {

using stream::Completion;
using stream::CompletionKind;

Completion numbered(uint64_t cookie) { return {CompletionKind::write_done, 0, cookie, 0}; }

TEST(ShmCompletionQueue, KeepsPostOrderWhileItGrowsAndWraps) {
  CompletionQueue queue(100);
  uint64_t pushed = 0, popped = 0;
  std::array<Completion, 7> out;
  // Pushes outrun pops, so the queue grows with a wrapped tail each time.
  while (pushed < 1000) {
    for (int index = 0; index < 9 && !queue.full(); ++index) queue.push(numbered(pushed++));
    const size_t count = queue.pop_into(out);
    for (size_t index = 0; index < count; ++index) EXPECT_EQ(out[index].cookie, popped++);
    if (queue.full()) {
      EXPECT_EQ(pushed - popped, 100u);
      while (const size_t more = queue.pop_into(out))
        for (size_t index = 0; index < more; ++index) EXPECT_EQ(out[index].cookie, popped++);
    }
  }
  while (const size_t more = queue.pop_into(out))
    for (size_t index = 0; index < more; ++index) EXPECT_EQ(out[index].cookie, popped++);
  EXPECT_EQ(popped, pushed);
  EXPECT_TRUE(queue.empty());
}

TEST(ShmCompletionQueue, IsFullAtItsCapacityNotBefore) {
  CompletionQueue queue(40);
  for (uint64_t cookie = 0; cookie < 40; ++cookie) {
    EXPECT_FALSE(queue.full());
    queue.push(numbered(cookie));
  }
  EXPECT_TRUE(queue.full());
  std::array<Completion, 64> out;
  ASSERT_EQ(queue.pop_into(out), 40u);
  for (uint64_t cookie = 0; cookie < 40; ++cookie) EXPECT_EQ(out[cookie].cookie, cookie);
}

}  // namespace
}  // namespace qpsock::transport::shm
