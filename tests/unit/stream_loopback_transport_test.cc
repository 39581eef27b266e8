// The loopback transport: what it delivers, and that it rejects what a real
// RC queue pair would reject.
#include <gtest/gtest.h>
#include <poll.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include "stream/loopback_transport.h"

namespace qpsock::stream {
namespace {

class LoopbackTransportTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(LoopbackTransport::make_pair(options_, first_, second_), 0); }

  std::vector<Completion> drain(Transport& transport) {
    std::vector<Completion> all;
    std::array<Completion, 8> batch;
    for (;;) {
      const int count = transport.poll(batch);
      EXPECT_GE(count, 0);
      if (count <= 0) return all;
      all.insert(all.end(), batch.begin(), batch.begin() + count);
    }
  }

  std::unique_ptr<MemoryRegistration> registered(Transport& transport, std::vector<std::byte>& memory,
                                                 MemoryAccess access) {
    std::unique_ptr<MemoryRegistration> registration;
    EXPECT_EQ(transport.register_memory(memory.data(), memory.size(), access, registration), 0);
    return registration;
  }

  LoopbackOptions options_{.max_inline = 64, .max_outstanding_reads = 4, .send_queue_depth = 8,
                           .notification_capacity = 4, .max_slices = 4};
  std::unique_ptr<LoopbackTransport> first_;
  std::unique_ptr<LoopbackTransport> second_;
};

TEST_F(LoopbackTransportTest, WriteWithImmediateLandsThenNotifies) {
  std::vector<std::byte> ring(256);
  auto ring_registration = registered(*second_, ring, MemoryAccess::remote_write);
  std::vector<std::byte> source(100, std::byte{7});
  auto source_registration = registered(*first_, source, MemoryAccess::local_only);
  const LocalSlice slice{source.data(), source.size(), source_registration.get()};
  ASSERT_EQ(first_->post_write({&slice, 1},
                               {reinterpret_cast<uint64_t>(ring.data()) + 8,
                                ring_registration->remote_key()},
                               0x1234u, 99),
            0);
  const auto local = drain(*first_);
  ASSERT_EQ(local.size(), 1u);
  EXPECT_EQ(local[0].kind, CompletionKind::write_done);
  EXPECT_EQ(local[0].status, 0);
  EXPECT_EQ(local[0].cookie, 99u);
  const auto remote = drain(*second_);
  ASSERT_EQ(remote.size(), 1u);
  EXPECT_EQ(remote[0].kind, CompletionKind::arrived);
  EXPECT_EQ(remote[0].immediate, 0x1234u);
  EXPECT_EQ(ring[8], std::byte{7});
  EXPECT_EQ(ring[107], std::byte{7});
  EXPECT_EQ(ring[108], std::byte{0});
}

TEST_F(LoopbackTransportTest, InlineWritesNeedNoRegistrationButLargerOnesDo) {
  std::vector<std::byte> ring(256);
  auto ring_registration = registered(*second_, ring, MemoryAccess::remote_write);
  const RemoteRegion target{reinterpret_cast<uint64_t>(ring.data()), ring_registration->remote_key()};
  std::vector<std::byte> source(100, std::byte{1});
  const LocalSlice small{source.data(), 64, nullptr};
  ASSERT_EQ(first_->post_write({&small, 1}, target, std::nullopt, 1), 0);
  EXPECT_EQ(drain(*first_)[0].status, 0);
  EXPECT_EQ(first_->statistics().inline_writes, 1u);
  const LocalSlice large{source.data(), 65, nullptr};
  ASSERT_EQ(first_->post_write({&large, 1}, target, std::nullopt, 2), 0);
  const auto completions = drain(*first_);
  ASSERT_FALSE(completions.empty());
  EXPECT_NE(completions[0].status, 0);
  EXPECT_TRUE(first_->link_broken());
}

TEST_F(LoopbackTransportTest, AWriteOutsideTheRegionBreaksTheLink) {
  std::vector<std::byte> ring(64);
  auto ring_registration = registered(*second_, ring, MemoryAccess::remote_write);
  std::array<std::byte, 16> bytes{};
  const LocalSlice slice{bytes.data(), bytes.size(), nullptr};
  ASSERT_EQ(first_->post_write({&slice, 1},
                               {reinterpret_cast<uint64_t>(ring.data()) + 56,
                                ring_registration->remote_key()},
                               std::nullopt, 1),
            0);
  EXPECT_NE(drain(*first_)[0].status, 0);
  // The peer learns too: its receive slots are flushed.
  const auto remote = drain(*second_);
  ASSERT_EQ(remote.size(), 1u);
  EXPECT_NE(remote[0].status, 0);
}

TEST_F(LoopbackTransportTest, ReadsNeedRemoteReadAccess) {
  std::vector<std::byte> source(128, std::byte{5});
  auto readable = registered(*second_, source, MemoryAccess::remote_read);
  std::vector<std::byte> landing(128);
  auto landing_registration = registered(*first_, landing, MemoryAccess::local_only);
  const LocalSlice slice{landing.data(), 100, landing_registration.get()};
  ASSERT_EQ(first_->post_read({&slice, 1}, {reinterpret_cast<uint64_t>(source.data()), readable->remote_key()}, 5), 0);
  const auto done = drain(*first_);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].kind, CompletionKind::read_done);
  EXPECT_EQ(done[0].status, 0);
  EXPECT_EQ(landing[99], std::byte{5});
  EXPECT_EQ(landing[100], std::byte{0});

  auto writable_only = registered(*second_, source, MemoryAccess::remote_write);
  ASSERT_EQ(first_->post_read({&slice, 1}, {reinterpret_cast<uint64_t>(source.data()), writable_only->remote_key()}, 6), 0);
  EXPECT_NE(drain(*first_)[0].status, 0);
}

TEST_F(LoopbackTransportTest, ADeregisteredRegionIsNoLongerReachable) {
  std::vector<std::byte> source(64);
  auto readable = registered(*second_, source, MemoryAccess::remote_read);
  const uint32_t key = readable->remote_key();
  readable.reset();
  std::vector<std::byte> landing(64);
  auto landing_registration = registered(*first_, landing, MemoryAccess::local_only);
  const LocalSlice slice{landing.data(), 64, landing_registration.get()};
  ASSERT_EQ(first_->post_read({&slice, 1}, {reinterpret_cast<uint64_t>(source.data()), key}, 1), 0);
  EXPECT_NE(drain(*first_)[0].status, 0);
}

TEST_F(LoopbackTransportTest, OneImmediateBeyondTheCapacityIsAnRnrError) {
  for (int sent = 0; sent < 4; ++sent) {
    ASSERT_EQ(first_->post_write({}, {0, 0}, 1u, 0), 0);
    drain(*first_);
  }
  EXPECT_FALSE(first_->link_broken());
  ASSERT_EQ(first_->post_write({}, {0, 0}, 1u, 0), 0);
  EXPECT_TRUE(first_->link_broken());
}

TEST_F(LoopbackTransportTest, PollingFreesReceiveSlots) {
  for (int round = 0; round < 10; ++round) {
    ASSERT_EQ(first_->post_write({}, {0, 0}, 1u, 0), 0);
    drain(*first_);
    EXPECT_EQ(drain(*second_).size(), 1u);
  }
  EXPECT_FALSE(first_->link_broken());
}

TEST_F(LoopbackTransportTest, TheSendQueueDepthIsEnforced) {
  for (int posted = 0; posted < 8; ++posted) ASSERT_EQ(first_->post_write({}, {0, 0}, std::nullopt, 0), 0);
  EXPECT_EQ(first_->post_write({}, {0, 0}, std::nullopt, 0), -ENOMEM);
  drain(*first_);
  EXPECT_EQ(first_->post_write({}, {0, 0}, std::nullopt, 0), 0);
}

TEST_F(LoopbackTransportTest, ArmingWakesTheWaitHandleForTheNextCompletion) {
  pollfd fd{second_->wait_handle(), POLLIN, 0};
  ASSERT_EQ(second_->arm(), 0);
  EXPECT_EQ(::poll(&fd, 1, 0), 0);
  ASSERT_EQ(first_->post_write({}, {0, 0}, 7u, 0), 0);
  EXPECT_EQ(::poll(&fd, 1, 1000), 1);
  EXPECT_EQ(drain(*second_).size(), 1u);
  EXPECT_EQ(::poll(&fd, 1, 0), 0);  // poll() consumed the wakeup
  // Arming with something already queued wakes at once.
  ASSERT_EQ(first_->post_write({}, {0, 0}, 7u, 0), 0);
  ASSERT_EQ(second_->arm(), 0);
  EXPECT_EQ(::poll(&fd, 1, 0), 1);
}

TEST_F(LoopbackTransportTest, TheNthPostFailsWithoutEffect) {
  first_->inject({.fail_post_number = 2, .fail_completions_after = std::nullopt});
  EXPECT_EQ(first_->post_write({}, {0, 0}, 1u, 0), 0);
  EXPECT_EQ(first_->post_write({}, {0, 0}, 1u, 0), -EIO);
  EXPECT_EQ(first_->post_write({}, {0, 0}, 1u, 0), 0);
  EXPECT_EQ(drain(*second_).size(), 2u);
  EXPECT_FALSE(first_->link_broken());
}

TEST_F(LoopbackTransportTest, CompletionsAfterNFailAndBreakTheLink) {
  first_->inject({.fail_post_number = std::nullopt, .fail_completions_after = 1});
  ASSERT_EQ(first_->post_write({}, {0, 0}, 1u, 0), 0);
  ASSERT_EQ(first_->post_write({}, {0, 0}, 1u, 0), 0);
  const auto completions = drain(*first_);
  ASSERT_GE(completions.size(), 2u);
  EXPECT_EQ(completions[0].status, 0);
  EXPECT_NE(completions[1].status, 0);
  EXPECT_TRUE(second_->link_broken());
}

TEST_F(LoopbackTransportTest, DroppingTheLinkFailsLaterPostsAndTellsBothSides) {
  first_->drop_link();
  EXPECT_NE(drain(*second_).at(0).status, 0);
  ASSERT_EQ(first_->post_write({}, {0, 0}, 1u, 0), 0);
  const auto completions = drain(*first_);
  ASSERT_EQ(completions.size(), 2u);
  EXPECT_NE(completions[0].status, 0);
  EXPECT_NE(completions[1].status, 0);
  EXPECT_TRUE(drain(*second_).empty());
}

}  // namespace
}  // namespace qpsock::stream
