// The shm transport against the Transport contract, with both ends in this
// process (the peer pid is our own): registrations and the checks on every
// remote access, immediates and the notification capacity, the send queue,
// reads by process_vm_readv, disconnects, the wait handle, setup failures,
// fork, and the stream engine running over it.
#include <gtest/gtest.h>

#include <thread>
#include <poll.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <vector>

#include "stream/loopback_stream_pair.h"
#include "support/stream_test_support.h"
#include "unit/shm_test_support.h"

namespace qpsock::transport::shm {
namespace {

using stream::Completion;
using stream::CompletionKind;
using stream::LocalSlice;
using stream::MappedMemory;
using stream::MemoryAccess;
using stream::MemoryRegistration;
using stream::RemoteRegion;
using stream::Transport;
using testing::arena_mappings;
using testing::establish_in_process;
using testing::SocketPair;

ShmOptions small_options() {
  ShmOptions options;
  options.ring_size = 64 << 10;
  options.notification_capacity = 4;
  options.send_queue_depth = 8;
  options.max_outstanding_reads = 4;
  options.max_slices = 4;
  options.setup_timeout = std::chrono::milliseconds{2000};
  return options;
}

uint64_t address_of(const void* pointer) { return reinterpret_cast<uint64_t>(pointer); }

class ShmTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(testing::establish_both(sockets_, small_options(), first_, second_));
    // The second end's receive ring, shared with the first.
    ASSERT_EQ(second_->map_receive_ring(4096, ring_), 0);
    ASSERT_EQ(second_->register_memory(ring_.data(), ring_.size(), MemoryAccess::remote_write,
                                       ring_registration_),
              0);
  }

  static std::vector<Completion> drain(Transport& transport) {
    std::vector<Completion> all;
    std::array<Completion, 8> batch;
    for (;;) {
      const int count = transport.poll(batch);
      EXPECT_GE(count, 0);
      if (count <= 0) return all;
      all.insert(all.end(), batch.begin(), batch.begin() + count);
    }
  }

  static std::unique_ptr<MemoryRegistration> registered(Transport& transport,
                                                        std::vector<std::byte>& memory,
                                                        MemoryAccess access) {
    std::unique_ptr<MemoryRegistration> registration;
    EXPECT_EQ(transport.register_memory(memory.data(), memory.size(), access, registration), 0);
    return registration;
  }

  RemoteRegion ring_at(size_t offset) const {
    return {address_of(ring_.data()) + offset, ring_registration_->remote_key()};
  }

  // Posts `bytes` into the second end's ring; the first end's completion status.
  int write_to_ring(RemoteRegion where, size_t bytes,
                    std::optional<uint32_t> immediate = std::nullopt) {
    std::vector<std::byte> source(bytes, std::byte{9});
    const LocalSlice slice{source.data(), source.size(), nullptr};
    EXPECT_EQ(first_->post_write({&slice, 1}, where, immediate, 1), 0);
    const auto completions = drain(*first_);
    EXPECT_FALSE(completions.empty());
    return completions.empty() ? -1 : completions[0].status;
  }

  // Reads `length` bytes of the second end's memory at `source` into a
  // landing buffer (registered, or not); the first end's completion status.
  int read_from(RemoteRegion source, size_t length, bool landing_registered = true) {
    std::vector<std::byte> landing(length);
    std::unique_ptr<MemoryRegistration> registration;
    if (landing_registered) registration = registered(*first_, landing, MemoryAccess::local_only);
    const LocalSlice slice{landing.data(), length, registration.get()};
    EXPECT_EQ(first_->post_read({&slice, 1}, source, 1), 0);
    const auto completions = drain(*first_);
    EXPECT_FALSE(completions.empty());
    return completions.empty() ? -1 : completions[0].status;
  }

  // That both ends see the link gone: later posts fail, the peer got one error.
  void expect_link_broken() {
    EXPECT_TRUE(first_->link_broken());
    const auto remote = drain(*second_);
    ASSERT_FALSE(remote.empty());
    EXPECT_EQ(remote.back().kind, CompletionKind::arrived);
    EXPECT_NE(remote.back().status, 0);
    EXPECT_TRUE(second_->link_broken());
    ASSERT_EQ(first_->post_write({}, {0, 0}, 1u, 2), 0);
    const auto later = drain(*first_);
    ASSERT_FALSE(later.empty());
    EXPECT_NE(later[0].status, 0);
  }

  SocketPair sockets_;
  std::unique_ptr<ShmTransport> first_;
  std::unique_ptr<ShmTransport> second_;
  MappedMemory ring_;
  std::unique_ptr<MemoryRegistration> ring_registration_;
};

TEST_F(ShmTransportTest, AWriteWithAnImmediateLandsThenNotifies) {
  std::vector<std::byte> source(100, std::byte{7});
  const LocalSlice slices[2] = {{source.data(), 60, nullptr}, {source.data() + 60, 40, nullptr}};
  ASSERT_EQ(first_->post_write(slices, ring_at(8), 0x1234u, 99), 0);
  const auto local = drain(*first_);
  ASSERT_EQ(local.size(), 1u);
  EXPECT_EQ(local[0].kind, CompletionKind::write_done);
  EXPECT_EQ(local[0].status, 0);
  EXPECT_EQ(local[0].cookie, 99u);
  const auto remote = drain(*second_);
  ASSERT_EQ(remote.size(), 1u);
  EXPECT_EQ(remote[0].kind, CompletionKind::arrived);
  EXPECT_EQ(remote[0].status, 0);
  EXPECT_EQ(remote[0].immediate, 0x1234u);
  EXPECT_EQ(ring_.data()[7], std::byte{0});
  EXPECT_EQ(ring_.data()[8], std::byte{7});
  EXPECT_EQ(ring_.data()[107], std::byte{7});
  EXPECT_EQ(ring_.data()[108], std::byte{0});
}

TEST_F(ShmTransportTest, EveryWriteIsInlineWithoutARegistration) {
  EXPECT_GE(first_->max_inline(), size_t{1} << 40);
  EXPECT_EQ(write_to_ring(ring_at(0), 4096), 0);
  EXPECT_FALSE(first_->link_broken());
}

TEST_F(ShmTransportTest, WritesArriveInPostOrder) {
  for (uint32_t index = 0; index < 4; ++index) {
    std::byte value{static_cast<unsigned char>(index)};
    const LocalSlice slice{&value, 1, nullptr};
    ASSERT_EQ(first_->post_write({&slice, 1}, ring_at(index), index, index), 0);
  }
  const auto local = drain(*first_);
  ASSERT_EQ(local.size(), 4u);
  const auto remote = drain(*second_);
  ASSERT_EQ(remote.size(), 4u);
  for (uint32_t index = 0; index < 4; ++index) {
    EXPECT_EQ(local[index].cookie, index);
    EXPECT_EQ(remote[index].immediate, index);
    EXPECT_EQ(ring_.data()[index], std::byte{static_cast<unsigned char>(index)});
  }
}

TEST_F(ShmTransportTest, AWriteOutsideTheRegistrationBreaksTheLink) {
  EXPECT_EQ(write_to_ring(ring_at(4096 - 15), 16), -EFAULT);
  expect_link_broken();
}

TEST_F(ShmTransportTest, AWriteBeforeTheRegistrationBreaksTheLink) {
  EXPECT_EQ(write_to_ring({address_of(ring_.data()) - 8, ring_registration_->remote_key()}, 8),
            -EFAULT);
  expect_link_broken();
}

TEST_F(ShmTransportTest, AWriteWithAWrongKeyBreaksTheLink) {
  RemoteRegion wrong = ring_at(0);
  wrong.key += 1 << 8;  // same slot, another generation
  EXPECT_EQ(write_to_ring(wrong, 8), -EFAULT);
  expect_link_broken();
}

TEST_F(ShmTransportTest, ADeregisteredRingIsNoLongerWritable) {
  const RemoteRegion old = ring_at(0);
  ring_registration_.reset();
  EXPECT_EQ(write_to_ring(old, 8), -EFAULT);
  expect_link_broken();
}

TEST_F(ShmTransportTest, ASubrangeRegistrationBoundsTheWrite) {
  std::unique_ptr<MemoryRegistration> part;
  ASSERT_EQ(second_->register_memory(ring_.data() + 1024, 64, MemoryAccess::remote_write, part), 0);
  EXPECT_EQ(write_to_ring({address_of(ring_.data()) + 1024, part->remote_key()}, 64), 0);
  EXPECT_EQ(write_to_ring({address_of(ring_.data()) + 1000, part->remote_key()}, 8), -EFAULT);
  expect_link_broken();
}

TEST_F(ShmTransportTest, RemoteWritesOutsideTheSharedRingAreRefused) {
  std::vector<std::byte> memory(256);
  std::unique_ptr<MemoryRegistration> registration;
  EXPECT_EQ(second_->register_memory(memory.data(), memory.size(), MemoryAccess::remote_write,
                                     registration),
            -EINVAL);
  EXPECT_EQ(
      second_->register_memory(ring_.data() + 4000, 200, MemoryAccess::remote_write, registration),
      -EINVAL);
}

TEST_F(ShmTransportTest, TheRingIsMappedOnceAndNoLargerThanAgreed) {
  MappedMemory again;
  EXPECT_EQ(second_->map_receive_ring(4096, again), -EBUSY);
  MappedMemory too_large;
  EXPECT_EQ(first_->map_receive_ring((64 << 10) + 1, too_large), -EINVAL);
  EXPECT_EQ(first_->map_receive_ring(64 << 10, too_large), 0);
}

TEST_F(ShmTransportTest, AReadOfARemoteReadRegistrationLandsInEverySlice) {
  std::vector<std::byte> source(3000);
  for (size_t index = 0; index < source.size(); ++index) source[index] = std::byte(index * 7);
  auto readable = registered(*second_, source, MemoryAccess::remote_read);
  std::vector<std::byte> landing(3000);
  auto landing_registration = registered(*first_, landing, MemoryAccess::local_only);
  const LocalSlice slices[3] = {{landing.data(), 1000, landing_registration.get()},
                                {landing.data() + 1000, 1, landing_registration.get()},
                                {landing.data() + 1001, 1499, landing_registration.get()}};
  ASSERT_EQ(first_->post_read(slices, {address_of(source.data()) + 500, readable->remote_key()}, 5),
            0);
  const auto done = drain(*first_);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].kind, CompletionKind::read_done);
  EXPECT_EQ(done[0].status, 0);
  EXPECT_EQ(done[0].cookie, 5u);
  EXPECT_EQ(std::memcmp(landing.data(), source.data() + 500, 2500), 0);
  EXPECT_EQ(landing[2500], std::byte{0});
  EXPECT_TRUE(drain(*second_).empty());  // a read is one-sided
}

TEST_F(ShmTransportTest, AReadNeedsRemoteReadAccess) {
  EXPECT_EQ(read_from(ring_at(0), 64), -EFAULT);
  expect_link_broken();
}

TEST_F(ShmTransportTest, AReadOfTheSharedRingNeedsNoSystemCall) {
  std::unique_ptr<MemoryRegistration> readable;
  ASSERT_EQ(second_->register_memory(ring_.data(), 128, MemoryAccess::remote_read, readable), 0);
  ring_.data()[5] = std::byte{42};
  EXPECT_EQ(read_from({address_of(ring_.data()), readable->remote_key()}, 128), 0);
}

TEST_F(ShmTransportTest, AReadPastTheRegistrationBreaksTheLink) {
  std::vector<std::byte> source(64);
  auto readable = registered(*second_, source, MemoryAccess::remote_read);
  EXPECT_EQ(read_from({address_of(source.data()) + 1, readable->remote_key()}, 64), -EFAULT);
  expect_link_broken();
}

TEST_F(ShmTransportTest, AReadIntoUnregisteredMemoryBreaksTheLink) {
  std::vector<std::byte> source(64);
  auto readable = registered(*second_, source, MemoryAccess::remote_read);
  EXPECT_EQ(read_from({address_of(source.data()), readable->remote_key()}, 64, false), -EFAULT);
  expect_link_broken();
}

TEST_F(ShmTransportTest, ADeregisteredSourceIsNoLongerReadable) {
  std::vector<std::byte> source(64);
  auto readable = registered(*second_, source, MemoryAccess::remote_read);
  const uint32_t key = readable->remote_key();
  readable.reset();
  // Its slot is reused by a new registration: the old key still matches nothing.
  auto reused = registered(*second_, source, MemoryAccess::remote_read);
  EXPECT_NE(reused->remote_key(), key);
  EXPECT_EQ(read_from({address_of(source.data()), key}, 64), -EFAULT);
  expect_link_broken();
}

TEST_F(ShmTransportTest, AKeyOfAnotherConnectionReachesNothing) {
  // A third and fourth end: the second's key means nothing on their link.
  SocketPair other_sockets;
  std::unique_ptr<ShmTransport> third, fourth;
  ASSERT_NO_FATAL_FAILURE(testing::establish_both(other_sockets, small_options(), third, fourth));
  std::byte value{1};
  const LocalSlice slice{&value, 1, nullptr};
  ASSERT_EQ(third->post_write({&slice, 1}, ring_at(0), std::nullopt, 1), 0);
  EXPECT_EQ(drain(*third).at(0).status, -EFAULT);
  EXPECT_EQ(ring_.data()[0], std::byte{0});
  EXPECT_FALSE(first_->link_broken());
}

TEST_F(ShmTransportTest, OneImmediateBeyondTheCapacityIsAnRnrError) {
  for (int sent = 0; sent < 4; ++sent) EXPECT_EQ(write_to_ring({0, 0}, 0, 1u), 0);
  EXPECT_FALSE(first_->link_broken());
  EXPECT_EQ(write_to_ring({0, 0}, 0, 1u), -EIO);
  // The four that fit are still delivered, then the error.
  const auto remote = drain(*second_);
  ASSERT_EQ(remote.size(), 5u);
  EXPECT_EQ(remote[3].status, 0);
  EXPECT_NE(remote[4].status, 0);
}

TEST_F(ShmTransportTest, PollingFreesNotificationSlots) {
  for (int round = 0; round < 40; ++round) {
    EXPECT_EQ(write_to_ring({0, 0}, 0, static_cast<uint32_t>(round)), 0);
    const auto remote = drain(*second_);
    ASSERT_EQ(remote.size(), 1u);
    EXPECT_EQ(remote[0].immediate, static_cast<uint32_t>(round));
  }
  EXPECT_FALSE(first_->link_broken());
}

TEST_F(ShmTransportTest, TheSendQueueDepthIsEnforced) {
  for (int posted = 0; posted < 8; ++posted)
    ASSERT_EQ(first_->post_write({}, {0, 0}, std::nullopt, 0), 0);
  EXPECT_EQ(first_->post_write({}, {0, 0}, std::nullopt, 0), -ENOMEM);
  EXPECT_EQ(drain(*first_).size(), 8u);
  EXPECT_EQ(first_->post_write({}, {0, 0}, std::nullopt, 0), 0);
}

TEST_F(ShmTransportTest, TooManySlicesAreRefused) {
  std::byte value{};
  const std::vector<LocalSlice> slices(5, LocalSlice{&value, 1, nullptr});
  EXPECT_EQ(first_->post_write(slices, ring_at(0), std::nullopt, 0), -EINVAL);
  EXPECT_FALSE(first_->link_broken());
}

TEST_F(ShmTransportTest, ADisconnectReachesThePeerAndRevokesOurMemory) {
  std::vector<std::byte> source(64);
  auto readable = registered(*first_, source, MemoryAccess::remote_read);
  // (A ring the pool gave another channel before holds its bytes.)
  ring_.data()[0] = std::byte{0x5a};
  second_->disconnect();
  second_->disconnect();  // idempotent
  // Our own error completion, once.
  const auto ours = drain(*second_);
  ASSERT_EQ(ours.size(), 1u);
  EXPECT_NE(ours[0].status, 0);
  // The peer's next poll tells it; its posts fail.
  const auto theirs = drain(*first_);
  ASSERT_EQ(theirs.size(), 1u);
  EXPECT_NE(theirs[0].status, 0);
  EXPECT_EQ(write_to_ring(ring_at(0), 8), -ECONNRESET);
  EXPECT_EQ(ring_.data()[0], std::byte{0x5a});
  // No new remote registrations on a dead link.
  std::unique_ptr<MemoryRegistration> later;
  EXPECT_LT(second_->register_memory(ring_.data(), 64, MemoryAccess::remote_write, later), 0);
}

TEST_F(ShmTransportTest, ThePeersLastImmediatesComeBeforeOurPostsItsCloseFlushed) {
  // The peer's last notifications, then its close; then a post of ours,
  // which the closed link fails. A stream breaks at the first error it
  // polls: had the failed post come first, it would never see the peer's
  // end of stream, nor the bytes announced before it.
  for (uint32_t value = 0; value < 3; ++value)
    ASSERT_EQ(first_->post_write({}, {0, 0}, value, 0), 0);
  first_->disconnect();
  ASSERT_EQ(second_->post_write({}, {0, 0}, 9u, 5), 0);
  const auto seen = drain(*second_);
  ASSERT_EQ(seen.size(), 5u);
  for (uint32_t value = 0; value < 3; ++value) {
    EXPECT_EQ(seen[value].kind, CompletionKind::arrived);
    EXPECT_EQ(seen[value].status, 0);
    EXPECT_EQ(seen[value].immediate, value);
  }
  EXPECT_EQ(seen[3].kind, CompletionKind::write_done);
  EXPECT_EQ(seen[3].cookie, 5u);
  EXPECT_NE(seen[3].status, 0);
  EXPECT_EQ(seen[4].kind, CompletionKind::arrived);
  EXPECT_NE(seen[4].status, 0);
}

TEST_F(ShmTransportTest, DestroyingAnEndReachesThePeer) {
  first_.reset();
  const auto theirs = drain(*second_);
  ASSERT_EQ(theirs.size(), 1u);
  EXPECT_NE(theirs[0].status, 0);
}

// The transport's listener, as a stream would be: an eventfd it writes.
class WakeupProbe final : public stream::WakeupListener {
 public:
  explicit WakeupProbe(Transport& transport) : transport_(transport) {
    transport_.set_wakeup_listener(this);
  }
  ~WakeupProbe() {
    transport_.set_wakeup_listener(nullptr);
    ::close(event_fd_);
  }
  WakeupProbe(const WakeupProbe&) = delete;
  WakeupProbe& operator=(const WakeupProbe&) = delete;

  void transport_signalled() override {
    const uint64_t one = 1;
    EXPECT_EQ(::write(event_fd_, &one, sizeof(one)), 8);
  }
  // Whether the transport told us within `milliseconds` (the loop's thread
  // tells, so "not woken" waits a while); consumes it.
  bool woken_within(int milliseconds) {
    pollfd handle{event_fd_, POLLIN, 0};
    if (::poll(&handle, 1, milliseconds) != 1) return false;
    uint64_t count;
    return ::read(event_fd_, &count, sizeof(count)) == 8;
  }

 private:
  Transport& transport_;
  int event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
};

TEST_F(ShmTransportTest, TheListenerHearsOnlyWhenArmed) {
  WakeupProbe probe(*second_);
  EXPECT_EQ(second_->wait_handle(), -1);
  // Not armed: the writer makes no system call, and nothing wakes.
  EXPECT_EQ(write_to_ring({0, 0}, 0, 1u), 0);
  EXPECT_FALSE(probe.woken_within(50));
  // Armed with something already there: the poll that follows an arm finds it.
  ASSERT_EQ(second_->arm(), 0);
  EXPECT_EQ(drain(*second_).size(), 1u);
  // Armed with nothing there: asleep until the peer's immediate.
  ASSERT_EQ(second_->arm(), 0);
  EXPECT_FALSE(probe.woken_within(20));
  EXPECT_EQ(write_to_ring({0, 0}, 0, 2u), 0);
  EXPECT_TRUE(probe.woken_within(5000));
  EXPECT_EQ(drain(*second_).at(0).immediate, 2u);
  // One wakeup per arm: the next immediate, unarmed, wakes nobody.
  EXPECT_EQ(write_to_ring({0, 0}, 0, 3u), 0);
  EXPECT_FALSE(probe.woken_within(50));
}

TEST_F(ShmTransportTest, AWriteWithoutAnImmediateWakesNobody) {
  WakeupProbe probe(*second_);
  ASSERT_EQ(second_->arm(), 0);
  EXPECT_EQ(write_to_ring(ring_at(0), 8), 0);
  EXPECT_FALSE(probe.woken_within(50));
}

TEST_F(ShmTransportTest, AnArmedSleeperWakesOnThePeersDisconnect) {
  WakeupProbe probe(*second_);
  ASSERT_EQ(second_->arm(), 0);
  EXPECT_FALSE(probe.woken_within(20));
  first_->disconnect();
  EXPECT_TRUE(probe.woken_within(5000));
  EXPECT_NE(drain(*second_).at(0).status, 0);
}

TEST_F(ShmTransportTest, OurOwnCompletionWakesAnotherArmedThread) {
  WakeupProbe probe(*first_);
  ASSERT_EQ(first_->arm(), 0);
  EXPECT_FALSE(probe.woken_within(20));
  ASSERT_EQ(first_->post_write({}, {0, 0}, std::nullopt, 3), 0);
  EXPECT_TRUE(probe.woken_within(5000));
}

TEST_F(ShmTransportTest, ChannelsOfOneLinkAreWokenApart) {
  // A second connection between the same two processes: the same doorbell
  // each way, each channel told of its own wakeups only.
  SocketPair sockets;
  std::unique_ptr<ShmTransport> third, fourth;
  ASSERT_NO_FATAL_FAILURE(testing::establish_both(sockets, small_options(), third, fourth));
  WakeupProbe second_probe(*second_);
  WakeupProbe fourth_probe(*fourth);
  ASSERT_EQ(second_->arm(), 0);
  ASSERT_EQ(fourth->arm(), 0);
  ASSERT_EQ(third->post_write({}, {0, 0}, 7u, 0), 0);
  EXPECT_TRUE(fourth_probe.woken_within(5000));
  EXPECT_FALSE(second_probe.woken_within(50));
  EXPECT_EQ(drain(*fourth).at(0).immediate, 7u);
  EXPECT_EQ(write_to_ring({0, 0}, 0, 8u), 0);
  EXPECT_TRUE(second_probe.woken_within(5000));
  EXPECT_FALSE(fourth_probe.woken_within(50));
}

// Open descriptors of this process.
int open_descriptors() {
  int count = 0;
  for (int fd = 0; fd < 65536; ++fd)
    if (::fcntl(fd, F_GETFD) >= 0) ++count;
  return count;
}

TEST_F(ShmTransportTest, AConnectionHoldsNoDescriptor) {
  // The fixture's pair made the link; 32 more connections over it, their
  // side channels closed and rings mapped (which closes each arena's
  // memfd), hold nothing more.
  const int before = open_descriptors();
  std::vector<std::unique_ptr<ShmTransport>> ends;
  std::vector<MappedMemory> rings;
  for (int connection = 0; connection < 32; ++connection) {
    SocketPair sockets;
    std::unique_ptr<ShmTransport> a, b;
    ASSERT_NO_FATAL_FAILURE(testing::establish_both(sockets, small_options(), a, b));
    for (auto* end : {&a, &b}) {
      ASSERT_EQ((*end)->map_receive_ring(4096, rings.emplace_back()), 0);
      ends.push_back(std::move(*end));
    }
  }
  EXPECT_EQ(open_descriptors(), before);
}

TEST_F(ShmTransportTest, AForkedChildCanNeitherUseNorCloseTheLink) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::array<Completion, 4> batch;
    bool refused = first_->post_write({}, {0, 0}, 1u, 0) == -EPIPE &&
                   first_->poll(batch) == -EPIPE && first_->arm() == -EPIPE;
    std::unique_ptr<MemoryRegistration> registration;
    std::vector<std::byte> memory(64);
    refused = refused && first_->register_memory(memory.data(), 64, MemoryAccess::remote_read,
                                                 registration) < 0;
    first_->disconnect();
    first_.reset();  // must not close the parent's link
    second_.reset();
    ::_exit(refused ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(first_->link_broken());
  EXPECT_EQ(write_to_ring(ring_at(0), 8, 5u), 0);
  const auto remote = drain(*second_);
  ASSERT_EQ(remote.size(), 1u);
  EXPECT_EQ(remote[0].status, 0);
}

TEST(ShmTransportSetupTest, EachSideConsumesExactlyItsOwnBytes) {
  SocketPair sockets;
  std::unique_ptr<ShmTransport> first, second;
  ASSERT_NO_FATAL_FAILURE(testing::establish_both(sockets, small_options(), first, second));
  ASSERT_EQ(::write(sockets.fds[0], "x", 1), 1);
  char byte = 0;
  ASSERT_EQ(::read(sockets.fds[1], &byte, 1), 1);
  EXPECT_EQ(byte, 'x');
  pollfd left[2] = {{sockets.fds[0], POLLIN, 0}, {sockets.fds[1], POLLIN, 0}};
  EXPECT_EQ(::poll(left, 2, 0), 0);
}

TEST(ShmTransportSetupTest, ALinksPoolsAreGoneOnceItIdlesOut) {
  set_link_idle_time(std::chrono::milliseconds{0});
  // The earlier tests' link idles out first.
  ASSERT_TRUE(testing::arena_mappings_become(0));
  const int before = arena_mappings();
  {
    SocketPair sockets;
    std::unique_ptr<ShmTransport> first, second;
    ASSERT_NO_FATAL_FAILURE(testing::establish_both(sockets, small_options(), first, second));
    EXPECT_GT(arena_mappings(), before);
    first->disconnect();
    second->disconnect();
  }
  // The link's sweep (once a second) lets go of a link without channels.
  EXPECT_TRUE(testing::arena_mappings_become(before));
  set_link_idle_time(std::chrono::seconds{10});
}

TEST(ShmTransportSetupTest, AChannelsArenaGoesBackToItsPoolForTheNext) {
  SocketPair first_sockets, second_sockets;
  std::unique_ptr<ShmTransport> first, second;
  ASSERT_NO_FATAL_FAILURE(testing::establish_both(first_sockets, small_options(), first, second));
  const ChannelFacts used = first->half();
  first.reset();
  second.reset();
  // Both ends let go of it: the next channel of the link takes the same arena.
  ASSERT_NO_FATAL_FAILURE(testing::establish_both(second_sockets, small_options(), first, second));
  const ChannelFacts next = first->half();
  const ChannelFacts other = second->half();
  EXPECT_TRUE(next.arena_offset == used.arena_offset || other.arena_offset == used.arena_offset);
}

TEST(ShmTransportSetupTest, BadArgumentsAreRefused) {
  SocketPair sockets;
  std::unique_ptr<ShmTransport> transport;
  ShmOptions options = small_options();
  options.max_slices = 2;
  EXPECT_EQ(
      ShmTransport::establish(sockets.fds[0], ShmRole::initiator, ::getpid(), options, transport),
      -EINVAL);
  EXPECT_EQ(
      ShmTransport::establish(sockets.fds[0], ShmRole::initiator, 0, small_options(), transport),
      -EINVAL);
  EXPECT_EQ(transport, nullptr);
}

TEST(ShmTransportSetupTest, ASilentPeerTimesOut) {
  SocketPair sockets;
  std::unique_ptr<ShmTransport> transport;
  ShmOptions options = small_options();
  options.setup_timeout = std::chrono::milliseconds{200};
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(
      ShmTransport::establish(sockets.fds[0], ShmRole::initiator, ::getpid(), options, transport),
      -ETIMEDOUT);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds{2});
}

TEST(ShmTransportSetupTest, APeerThatClosesTheChannelFailsSetup) {
  SocketPair sockets;
  ::close(sockets.fds[1]);
  sockets.fds[1] = -1;
  std::unique_ptr<ShmTransport> transport;
  EXPECT_LT(ShmTransport::establish(sockets.fds[0], ShmRole::initiator, ::getpid(), small_options(),
                                    transport),
            0);
}

TEST(ShmTransportSetupTest, AFailureOnOneSideFailsBothAndKeepsTheChannelInStep) {
  SocketPair sockets;
  std::unique_ptr<ShmTransport> first, second;
  // One side fails in its local setup (no such peer pid): it still says so
  // in its hello, so the other fails at once and neither reads too much.
  testing::EstablishResults results;
  log::enabled(log::Level::warn);  // as establish_in_process does
  std::thread initiator([&] {
    results.first = ShmTransport::establish(sockets.fds[0], ShmRole::initiator, ::getpid(),
                                            small_options(), first);
  });
  // Pid 0x3fffffff is beyond pid_max: pidfd_open fails in local setup.
  results.second = ShmTransport::establish(sockets.fds[1], ShmRole::responder, 0x3fffffff,
                                           small_options(), second);
  initiator.join();
  EXPECT_EQ(results.first, -ECONNREFUSED);
  EXPECT_LT(results.second, 0);
  pollfd left[2] = {{sockets.fds[0], POLLIN, 0}, {sockets.fds[1], POLLIN, 0}};
  EXPECT_EQ(::poll(left, 2, 0), 0);
}

// At a descriptor limit (here RLIMIT_NOFILE 64, under which qpsock keeps
// none of its own) both sides decline, and the process says so in one
// warning line, not one per attempt: a process holding many connections
// meets the limit at every attempt while it lasts.
void establish_three_times_at_the_limit() {
  SocketPair sockets;
  const rlimit limit{64, 64};
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) _exit(2);
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::unique_ptr<ShmTransport> first, second;
    const auto results = establish_in_process(sockets, small_options(), small_options(), first, second);
    if (results.first != -EMFILE || results.second != -EMFILE) _exit(3);
  }
  _exit(0);
}

TEST(ShmTransportSetupTest, ADescriptorLimitDeclinesWithOneWarningAProcess) {
  EXPECT_EXIT(establish_three_times_at_the_limit(), ::testing::ExitedWithCode(0),
              "^[^\n]*warn: RLIMIT_NOFILE 64 \\(hard 64\\)[^\n]*\n$");
}

TEST(ShmTransportSetupTest, TwoInitiatorsClash) {
  SocketPair sockets;
  std::unique_ptr<ShmTransport> first, second;
  const auto results = establish_in_process(sockets, small_options(), small_options(), first,
                                            second, ShmRole::initiator);
  EXPECT_EQ(results.first, -EPROTO);
  EXPECT_EQ(results.second, -EPROTO);
}

// The engine over shm, in one process: small writes, a rendezvous by
// process_vm_readv, and the ring mapped through map_receive_ring.
TEST(ShmStreamTest, TheEngineRunsOverShm) {
  stream::testing::Watchdog watchdog(std::chrono::seconds{30});
  SocketPair sockets;
  ShmOptions options;
  options.ring_size = 64 << 10;
  std::unique_ptr<ShmTransport> first_transport, second_transport;
  ASSERT_NO_FATAL_FAILURE(
      testing::establish_both(sockets, options, first_transport, second_transport));
  const stream::StreamSettings settings = stream::testing::small_settings();
  std::unique_ptr<stream::Stream> first, second;
  ASSERT_EQ(stream::Stream::create(std::move(first_transport), settings, nullptr, first), 0);
  ASSERT_EQ(stream::Stream::create(std::move(second_transport), settings, nullptr, second), 0);
  ASSERT_EQ(stream::connect_streams(*first, *second), 0);

  std::vector<uint8_t> sent(1 << 20);
  stream::testing::fill_pattern(3, 0, sent);
  std::vector<uint8_t> received(sent.size());
  std::thread reader([&] {
    EXPECT_EQ(stream::testing::receive_bytes(*second, received, MSG_WAITALL),
              static_cast<ssize_t>(received.size()));
  });
  // Small pieces (eager) then one large one (rendezvous).
  size_t offset = 0;
  for (size_t piece : {1, 7, 100, 4000, 20000}) {
    ASSERT_EQ(stream::testing::send_bytes(*first, {sent.data() + offset, piece}),
              static_cast<ssize_t>(piece));
    offset += piece;
  }
  ASSERT_EQ(stream::testing::send_bytes(*first, {sent.data() + offset, sent.size() - offset}),
            static_cast<ssize_t>(sent.size() - offset));
  reader.join();
  EXPECT_EQ(stream::testing::first_mismatch(3, 0, received), -1);
  EXPECT_EQ(first->close().error, 0);
  uint8_t byte;
  EXPECT_EQ(stream::testing::receive_bytes(*second, {&byte, 1}), 0);
}

}  // namespace
}  // namespace qpsock::transport::shm
