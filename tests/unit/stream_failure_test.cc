// Transport failures at every step: a post that fails, a completion with an
// error, a peer that vanishes mid-rendezvous, a notification that makes no
// sense. Each ends in ECONNRESET/EPIPE (or EOF), never a hang, never wrong bytes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <thread>
#include <vector>

#include "support/stream_test_support.h"

namespace qpsock::stream {
namespace {

using namespace std::chrono_literals;
using ::testing::_;
using ::testing::AtLeast;
using ::testing::NiceMock;
using ::testing::Return;
using testing::fill_pattern;
using testing::kBothMethods;
using testing::method_name;
using testing::first_mismatch;
using testing::receive_bytes;
using testing::send_bytes;
using testing::small_settings;
using testing::Watchdog;

// A transport that does what the loopback end it wraps does, unless told otherwise.
class MockTransport : public Transport {
 public:
  explicit MockTransport(std::unique_ptr<LoopbackTransport> real) : real_(std::move(real)) {
    ON_CALL(*this, register_memory).WillByDefault([this](void* address, size_t length, MemoryAccess access, std::unique_ptr<MemoryRegistration>& out) {
      return real_->register_memory(address, length, access, out);
    });
    ON_CALL(*this, post_write).WillByDefault([this](std::span<const LocalSlice> source, RemoteRegion to, std::optional<uint32_t> immediate, uint64_t cookie) {
      return real_->post_write(source, to, immediate, cookie);
    });
    ON_CALL(*this, post_read).WillByDefault([this](std::span<const LocalSlice> into, RemoteRegion from, uint64_t cookie) {
      return real_->post_read(into, from, cookie);
    });
    ON_CALL(*this, poll).WillByDefault([this](std::span<Completion> out) { return real_->poll(out); });
    ON_CALL(*this, wait_handle).WillByDefault([this] { return real_->wait_handle(); });
    ON_CALL(*this, arm).WillByDefault([this] { return real_->arm(); });
    ON_CALL(*this, disconnect).WillByDefault([this] { real_->disconnect(); });
    ON_CALL(*this, max_inline).WillByDefault([this] { return real_->max_inline(); });
    ON_CALL(*this, max_outstanding_reads).WillByDefault([this] { return real_->max_outstanding_reads(); });
    ON_CALL(*this, send_queue_depth).WillByDefault([this] { return real_->send_queue_depth(); });
    ON_CALL(*this, notification_capacity).WillByDefault([this] { return real_->notification_capacity(); });
    ON_CALL(*this, max_slices).WillByDefault([this] { return real_->max_slices(); });
  }

  MOCK_METHOD(int, register_memory, (void*, size_t, MemoryAccess, std::unique_ptr<MemoryRegistration>&), (override));
  MOCK_METHOD(int, post_write, (std::span<const LocalSlice>, RemoteRegion, std::optional<uint32_t>, uint64_t), (override));
  MOCK_METHOD(int, post_read, (std::span<const LocalSlice>, RemoteRegion, uint64_t), (override));
  MOCK_METHOD(int, poll, (std::span<Completion>), (override));
  MOCK_METHOD(int, wait_handle, (), (const, override));
  MOCK_METHOD(int, arm, (), (override));
  MOCK_METHOD(void, disconnect, (), (override));
  MOCK_METHOD(size_t, max_inline, (), (const, override));
  MOCK_METHOD(uint32_t, max_outstanding_reads, (), (const, override));
  MOCK_METHOD(uint32_t, send_queue_depth, (), (const, override));
  MOCK_METHOD(uint32_t, notification_capacity, (), (const, override));
  MOCK_METHOD(uint32_t, max_slices, (), (const, override));

  LoopbackTransport& real() { return *real_; }

 private:
  std::unique_ptr<LoopbackTransport> real_;
};

class StreamMockFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::unique_ptr<LoopbackTransport> first, second;
    ASSERT_EQ(LoopbackTransport::make_pair({}, first, second), 0);
    auto mock = std::make_unique<NiceMock<MockTransport>>(std::move(first));
    mock_ = mock.get();
    ASSERT_EQ(Stream::create(std::move(mock), small_settings(), nullptr, mocked_), 0);
    ASSERT_EQ(Stream::create(std::move(second), small_settings(), nullptr, peer_), 0);
    ASSERT_EQ(connect_streams(*mocked_, *peer_), 0);
  }

  // Delivers `completion` on the mocked side's next poll.
  void inject_completion(Completion completion) {
    EXPECT_CALL(*mock_, poll(_))
        .WillOnce([completion](std::span<Completion> out) {
          out[0] = completion;
          return 1;
        })
        .WillRepeatedly([this](std::span<Completion> out) { return mock_->real().poll(out); });
  }

  void expect_broken_like_a_reset() {
    std::vector<uint8_t> buffer(10);
    EXPECT_EQ(receive_bytes(*mocked_, buffer), -ECONNRESET);
    EXPECT_EQ(receive_bytes(*mocked_, buffer), 0);
    EXPECT_EQ(send_bytes(*mocked_, buffer), -EPIPE);
    EXPECT_NE(mocked_->readiness() & POLLHUP, 0);
  }

  NiceMock<MockTransport>* mock_ = nullptr;
  std::unique_ptr<Stream> mocked_;
  std::unique_ptr<Stream> peer_;
};

TEST_F(StreamMockFailureTest, AFailedPostBreaksTheStreamAndDisconnects) {
  EXPECT_CALL(*mock_, post_write(_, _, _, _)).WillOnce(Return(-EIO));
  EXPECT_CALL(*mock_, disconnect()).Times(AtLeast(1));
  std::vector<uint8_t> data(100, 1);
  EXPECT_EQ(send_bytes(*mocked_, data), -ECONNRESET);
  EXPECT_EQ(send_bytes(*mocked_, data), -EPIPE);
  std::vector<uint8_t> buffer(10);
  EXPECT_EQ(receive_bytes(*mocked_, buffer), 0);
  // The peer learns through the transport.
  EXPECT_EQ(receive_bytes(*peer_, buffer), -ECONNRESET);
}

TEST_F(StreamMockFailureTest, AFailingCompletionQueueBreaksTheStream) {
  EXPECT_CALL(*mock_, poll(_)).WillRepeatedly(Return(-EIO));
  expect_broken_like_a_reset();
}

TEST_F(StreamMockFailureTest, AnArmThatFailsDoesNotLeaveAReaderAsleep) {
  Watchdog watchdog(30s);
  EXPECT_CALL(*mock_, arm()).WillRepeatedly(Return(-EIO));
  expect_broken_like_a_reset();
}

TEST_F(StreamMockFailureTest, AnErrorCompletionBreaksTheStream) {
  inject_completion({CompletionKind::arrived, -ECONNRESET, 0, 0});
  expect_broken_like_a_reset();
}

TEST_F(StreamMockFailureTest, AnUnknownNotificationIsAProtocolError) {
  inject_completion({CompletionKind::arrived, 0, 0, 0xf0000001u});
  expect_broken_like_a_reset();
}

TEST_F(StreamMockFailureTest, CreditForBytesNeverWrittenIsAProtocolError) {
  inject_completion({CompletionKind::arrived, 0, 0,
                     encode_notification({NotificationKind::credit, 1000})});
  expect_broken_like_a_reset();
}

TEST_F(StreamMockFailureTest, DataAnnouncedButNeverWrittenIsAProtocolError) {
  inject_completion({CompletionKind::arrived, 0, 0,
                     encode_notification({NotificationKind::data_arrived, 4})});
  expect_broken_like_a_reset();
}

TEST(StreamCreateFailure, ARingThatCannotBeRegisteredFailsCreation) {
  std::unique_ptr<LoopbackTransport> first, second;
  ASSERT_EQ(LoopbackTransport::make_pair({}, first, second), 0);
  auto mock = std::make_unique<NiceMock<MockTransport>>(std::move(first));
  EXPECT_CALL(*mock, register_memory(_, _, _, _)).WillOnce(Return(-ENOMEM));
  std::unique_ptr<Stream> stream;
  EXPECT_EQ(Stream::create(std::move(mock), small_settings(), nullptr, stream), -ENOMEM);
  EXPECT_EQ(stream, nullptr);
}

TEST(StreamCreateFailure, BadSettingsAndTransportsAreRejected) {
  std::unique_ptr<LoopbackTransport> first, second;
  ASSERT_EQ(LoopbackTransport::make_pair({}, first, second), 0);
  StreamSettings settings = small_settings();
  settings.ring_size = 3000;
  std::unique_ptr<Stream> stream;
  EXPECT_EQ(Stream::create(std::move(first), settings, nullptr, stream), -EINVAL);
  LoopbackOptions tiny;
  tiny.notification_capacity = 3;
  ASSERT_EQ(LoopbackTransport::make_pair(tiny, first, second), 0);
  EXPECT_EQ(Stream::create(std::move(first), small_settings(), nullptr, stream), -EINVAL);
  std::vector<uint8_t> buffer(1);
  ASSERT_EQ(LoopbackTransport::make_pair({}, first, second), 0);
  ASSERT_EQ(Stream::create(std::move(first), small_settings(), nullptr, stream), 0);
  EXPECT_EQ(send_bytes(*stream, buffer), -ENOTCONN);
  EXPECT_EQ(receive_bytes(*stream, buffer), -ENOTCONN);
}

// A workload that touches every path (eager both ways, rendezvous, credit
// returns, slot returns) run with a fault armed on one side. Whatever breaks,
// every call returns, errors are resets or broken pipes, and every byte that
// was delivered is right.
struct ScenarioOutcome {
  bool any_error = false;
  bool wrong_bytes = false;
  bool unexpected_error = false;
};

bool reset_like(ssize_t result) { return result == -ECONNRESET || result == -EPIPE; }

ScenarioOutcome run_scenario(LoopbackStreamPair& pair) {
  ScenarioOutcome outcome;
  Stream& a = *pair.first;
  Stream& b = *pair.second;
  const size_t pieces[] = {1000, 100 << 10, 3000, 150 << 10, 1};
  size_t total = 0;
  for (size_t piece : pieces) total += piece;
  std::vector<uint8_t> data(total);
  fill_pattern(9, 0, data);
  std::atomic<bool> sender_error{false};
  std::thread sender([&] {
    size_t offset = 0;
    for (size_t piece : pieces) {
      const ssize_t sent = send_bytes(a, {data.data() + offset, piece});
      if (sent != static_cast<ssize_t>(piece)) {
        sender_error = true;
        if (sent >= 0 || !reset_like(sent)) return;  // a partial count is fine too
        return;
      }
      offset += piece;
    }
  });
  std::vector<uint8_t> in(total);
  size_t received = 0;
  while (received < total) {
    const ssize_t got = receive_bytes(b, {in.data() + received, total - received});
    if (got <= 0) {
      outcome.any_error = true;
      if (got < 0 && !reset_like(got)) outcome.unexpected_error = true;
      break;
    }
    received += got;
  }
  // If the reader stopped, the sender may be waiting for a pull: break it.
  if (received < total) b.abort();
  sender.join();
  outcome.any_error = outcome.any_error || sender_error;
  outcome.wrong_bytes = first_mismatch(9, 0, {in.data(), received}) != -1;
  // And back the other way.
  std::vector<uint8_t> back(20000, 7);
  const ssize_t sent_back = send_bytes(b, back, 0, false);
  if (sent_back < 0) {
    outcome.any_error = true;
    if (!reset_like(sent_back) && sent_back != -EAGAIN) outcome.unexpected_error = true;
  }
  std::vector<uint8_t> back_in(20000);
  const ssize_t got_back = receive_bytes(a, back_in, 0, false);
  if (got_back < 0 && !reset_like(got_back) && got_back != -EAGAIN) outcome.unexpected_error = true;
  for (ssize_t index = 0; index < got_back; ++index)
    if (back_in[index] != 7) outcome.wrong_bytes = true;
  return outcome;
}

TEST(StreamFaultSweep, APostFailingAtAnyStepEndsInAResetNotAHang) {
  Watchdog watchdog(120s, "post fault sweep");
  for (RendezvousMethod method : kBothMethods)
  for (int side = 0; side < 2; ++side) {
    for (uint64_t post = 1; post <= 40; ++post) {
      SCOPED_TRACE(method_name(method));
      LoopbackStreamPair pair;
      ASSERT_EQ(make_loopback_stream_pair({}, small_settings(method), small_settings(method), pair), 0);
      (side == 0 ? pair.first_transport : pair.second_transport)
          ->inject({.fail_post_number = post, .fail_completions_after = std::nullopt});
      const ScenarioOutcome outcome = run_scenario(pair);
      EXPECT_FALSE(outcome.wrong_bytes) << "side " << side << " post " << post;
      EXPECT_FALSE(outcome.unexpected_error) << "side " << side << " post " << post;
      // A break the workload did not run into is seen by the next call.
      if (pair.first_transport->link_broken()) {
        const uint8_t byte = 0;
        EXPECT_TRUE(reset_like(send_bytes(*pair.first, {&byte, 1}, 0, false))) << "side " << side << " post " << post;
        EXPECT_TRUE(reset_like(send_bytes(*pair.second, {&byte, 1}, 0, false))) << "side " << side << " post " << post;
      }
    }
  }
}

TEST(StreamFaultSweep, ACompletionFailingAtAnyStepEndsInAResetNotAHang) {
  Watchdog watchdog(120s, "completion fault sweep");
  for (RendezvousMethod method : kBothMethods)
  for (int side = 0; side < 2; ++side) {
    for (uint64_t completions = 0; completions <= 40; ++completions) {
      SCOPED_TRACE(method_name(method));
      LoopbackStreamPair pair;
      ASSERT_EQ(make_loopback_stream_pair({}, small_settings(method), small_settings(method), pair), 0);
      (side == 0 ? pair.first_transport : pair.second_transport)
          ->inject({.fail_post_number = std::nullopt, .fail_completions_after = completions});
      const ScenarioOutcome outcome = run_scenario(pair);
      EXPECT_FALSE(outcome.wrong_bytes) << "side " << side << " after " << completions;
      EXPECT_FALSE(outcome.unexpected_error) << "side " << side << " after " << completions;
      // A break the workload did not run into is seen by the next call.
      if (pair.first_transport->link_broken()) {
        const uint8_t byte = 0;
        EXPECT_TRUE(reset_like(send_bytes(*pair.first, {&byte, 1}, 0, false))) << "side " << side << " after " << completions;
        EXPECT_TRUE(reset_like(send_bytes(*pair.second, {&byte, 1}, 0, false))) << "side " << side << " after " << completions;
      }
    }
  }
}

TEST(StreamPeerDropped, MidRendezvousBothSidesSeeAReset) {
  for (RendezvousMethod method : kBothMethods) {
  SCOPED_TRACE(method_name(method));
  LoopbackStreamPair pair;
  ASSERT_EQ(make_loopback_stream_pair({}, small_settings(method), small_settings(method), pair), 0);
  Watchdog watchdog(30s);
  std::vector<uint8_t> data(1 << 20);
  fill_pattern(10, 0, data);
  std::atomic<ssize_t> sent{1};
  std::thread sender([&] { sent = send_bytes(*pair.first, data); });
  std::vector<uint8_t> in(data.size());
  ASSERT_EQ(receive_bytes(*pair.second, {in.data(), 5000}), 5000);
  pair.second_transport->drop_link();
  sender.join();
  EXPECT_TRUE(reset_like(sent)) << sent;
  // The reader gets what it had already pulled, then the reset, then EOF.
  size_t received = 5000;
  ssize_t got;
  while ((got = receive_bytes(*pair.second, {in.data() + received, in.size() - received})) > 0)
    received += got;
  EXPECT_EQ(got, -ECONNRESET);
  EXPECT_LT(received, data.size());
  EXPECT_EQ(first_mismatch(10, 0, {in.data(), received}), -1);
  EXPECT_EQ(receive_bytes(*pair.second, in), 0);
  }
}

TEST(StreamPeerDropped, ABlockedWriterWakesWithAReset) {
  LoopbackStreamPair pair;
  StreamSettings settings = small_settings();
  settings.rendezvous_threshold = uint64_t{1} << 40;
  ASSERT_EQ(make_loopback_stream_pair({}, settings, settings, pair), 0);
  Watchdog watchdog(30s);
  std::vector<uint8_t> data(1 << 20, 1);
  std::atomic<ssize_t> sent{-1};
  std::thread sender([&] { sent = send_bytes(*pair.first, data); });
  std::this_thread::sleep_for(20ms);
  pair.first_transport->drop_link();
  sender.join();
  // Some bytes went before the ring filled: TCP reports the partial count.
  EXPECT_GT(sent, 0);
  EXPECT_LT(sent, 1 << 20);
  EXPECT_EQ(send_bytes(*pair.first, data), -ECONNRESET);
}

TEST(StreamAbort, AbortDuringARendezvousReturnsAndTheBufferIsNoLongerReadable) {
  for (RendezvousMethod method : kBothMethods) {
  SCOPED_TRACE(method_name(method));
  LoopbackStreamPair pair;
  ASSERT_EQ(make_loopback_stream_pair({}, small_settings(method), small_settings(method), pair), 0);
  Watchdog watchdog(30s);
  std::vector<uint8_t> data(1 << 20, 3);
  std::atomic<ssize_t> sent{1};
  std::thread sender([&] { sent = send_bytes(*pair.first, data); });
  while (pair.second->readable_bytes() < data.size()) std::this_thread::sleep_for(1ms);
  pair.first->abort();
  sender.join();
  EXPECT_EQ(sent, -EPIPE);
  std::vector<uint8_t> in(data.size());
  EXPECT_EQ(receive_bytes(*pair.second, in), -ECONNRESET);
  EXPECT_EQ(pair.second_transport->statistics().bytes_read, 0u);
  EXPECT_EQ(pair.second->rendezvous_counts().bytes_received, 0u);
  }
}

// RendezvousMethod::write: the peer's requests and answers are checked
// before anything is posted or believed.
//
// The second stream's transport sends the first `notification` alone, as a
// peer would; what a non-blocking read of the first then returns.
ssize_t read_after_the_peer_sends(LoopbackStreamPair& pair, Notification notification) {
  if (pair.second_transport->post_write({}, RemoteRegion{0, 0}, encode_notification(notification),
                                        0) != 0)
    return -EIO;
  std::vector<uint8_t> buffer(10);
  return receive_bytes(*pair.first, buffer, MSG_DONTWAIT);
}

TEST(StreamWriteRequests, ARequestForBytesNeverOfferedIsAProtocolError) {
  Watchdog watchdog(30s);
  LoopbackStreamPair pair;
  ASSERT_EQ(make_loopback_stream_pair({}, small_settings(RendezvousMethod::write),
                                      small_settings(RendezvousMethod::write), pair),
            0);
  // A request box slot that holds nothing we offered (no rendezvous is pending).
  EXPECT_EQ(read_after_the_peer_sends(pair, {NotificationKind::rendezvous_write_request, 3}),
            -ECONNRESET);
  EXPECT_TRUE(pair.first->broken());
}

TEST(StreamWriteRequests, BytesWrittenThatWereNeverAskedForAreAProtocolError) {
  Watchdog watchdog(30s);
  for (RendezvousMethod method : kBothMethods) {
    SCOPED_TRACE(method_name(method));
    LoopbackStreamPair pair;
    ASSERT_EQ(make_loopback_stream_pair({}, small_settings(method), small_settings(method), pair), 0);
    EXPECT_EQ(read_after_the_peer_sends(pair, {NotificationKind::rendezvous_written, 0}),
              -ECONNRESET);
  }
}

}  // namespace
}  // namespace qpsock::stream
