// RendezvousSender: when a sending thread may give its buffer back.
#include "stream/rendezvous_sender.h"

#include <gtest/gtest.h>

#include <array>
#include <memory>

namespace qpsock::stream {
namespace {

class FakeRegistration final : public MemoryRegistration {
 public:
  FakeRegistration(std::byte* address, size_t length)
      : MemoryRegistration(address, length, 1, 2, MemoryAccess::local_only) {}
};

class RendezvousSenderTest : public ::testing::Test {
 protected:
  uint32_t start() {
    return sender_.start(buffer_.data(), buffer_.size(), registration_).id;
  }

  std::array<std::byte, 1000> buffer_{};
  RegistrationLease registration_ =
      std::make_shared<FakeRegistration>(buffer_.data(), buffer_.size());
  RendezvousSender sender_;
};

TEST_F(RendezvousSenderTest, ReadMethodSettlesOnlyOnTheReceiversAnswer) {
  const uint32_t id = start();
  EXPECT_FALSE(sender_.settled(id));
  EXPECT_EQ(sender_.bytes_in_flight(), 1000u);
  ASSERT_TRUE(sender_.on_answer(id, RendezvousOutcome::done));
  EXPECT_TRUE(sender_.settled(id));
  EXPECT_EQ(sender_.outcome(id), RendezvousOutcome::done);
  EXPECT_FALSE(sender_.on_answer(id, RendezvousOutcome::done)) << "answered twice";
}

TEST_F(RendezvousSenderTest, WrittenInFullItIsDoneWhenTheLastWriteCompletes) {
  const uint32_t id = start();
  const auto first = sender_.accept_write_request(id, 0, 600);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->address, buffer_.data());
  const auto second = sender_.accept_write_request(id, 600, 400);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->address, buffer_.data() + 600);
  sender_.on_write_completed(id, true);
  EXPECT_FALSE(sender_.settled(id)) << "one write still reads the buffer";
  sender_.on_write_completed(id, true);
  EXPECT_TRUE(sender_.settled(id));
  EXPECT_EQ(sender_.outcome(id), RendezvousOutcome::done);
  EXPECT_EQ(sender_.bytes_in_flight(), 0u);
}

TEST_F(RendezvousSenderTest, WrittenInPartItWaitsForTheRest) {
  const uint32_t id = start();
  ASSERT_TRUE(sender_.accept_write_request(id, 0, 999));
  sender_.on_write_completed(id, true);
  EXPECT_FALSE(sender_.settled(id));
  EXPECT_EQ(sender_.outcome(id), RendezvousOutcome::pending);
}

TEST_F(RendezvousSenderTest, AFailedWriteNeverMakesItDone) {
  const uint32_t id = start();
  ASSERT_TRUE(sender_.accept_write_request(id, 0, 500));
  ASSERT_TRUE(sender_.accept_write_request(id, 500, 500));
  sender_.on_write_completed(id, false);
  sender_.on_write_completed(id, true);
  EXPECT_EQ(sender_.outcome(id), RendezvousOutcome::pending);
  EXPECT_FALSE(sender_.settled(id));
}

TEST_F(RendezvousSenderTest, RequestsOutOfOrderTwiceOrBeyondTheEndAreRefused) {
  const uint32_t id = start();
  EXPECT_FALSE(sender_.accept_write_request(id, 100, 100)) << "skips bytes 0-99";
  EXPECT_FALSE(sender_.accept_write_request(id, 0, 1001)) << "beyond the end";
  EXPECT_FALSE(sender_.accept_write_request(id, 0, 0)) << "empty";
  EXPECT_FALSE(sender_.accept_write_request(id + 1, 0, 10)) << "no such rendezvous";
  ASSERT_TRUE(sender_.accept_write_request(id, 0, 100));
  EXPECT_FALSE(sender_.accept_write_request(id, 0, 100)) << "the same bytes twice";
  EXPECT_TRUE(sender_.accept_write_request(id, 100, 900));
}

TEST_F(RendezvousSenderTest, ADeclinedRendezvousTakesNoWrites) {
  const uint32_t id = start();
  ASSERT_TRUE(sender_.on_answer(id, RendezvousOutcome::declined));
  EXPECT_TRUE(sender_.settled(id));
  EXPECT_FALSE(sender_.accept_write_request(id, 0, 1000));
}

}  // namespace
}  // namespace qpsock::stream
