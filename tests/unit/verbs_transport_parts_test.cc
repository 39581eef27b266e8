// The verbs transport's parts that need no RDMA device: the connect's private
// data (the hello), the ledger that names each completion's post, and the
// access flags of each kind of registration. The transport itself runs on
// real verbs in tests/vm (the Soft-RoCE VM).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "transport/verbs/connection_hello.h"
#include "transport/verbs/post_ledger.h"
#include "transport/verbs/verbs_connection.h"
#include "transport/verbs/verbs_options.h"
#include "transport/verbs/verbs_registration.h"

namespace qpsock::transport::verbs {
namespace {

using stream::CompletionKind;
using stream::MemoryAccess;
using stream::StreamEndpoint;

TEST(VerbsHelloTest, FitsAnRcConnectsPrivateData) {
  EXPECT_LE(kHelloSize, kLargestConnectPrivateData);
  EXPECT_EQ(encode_hello({}).size(), kHelloSize);
}

TEST(VerbsHelloTest, CarriesTheEndpointBothWays) {
  const StreamEndpoint sent{0x00007f12'34567000, 0xdeadbeef, uint64_t{1} << 30, 1021};
  const EncodedHello hello = encode_hello({sent, 0});
  ConnectionHello decoded;
  ASSERT_EQ(decode_hello(hello.data(), hello.size(), decoded), 0);
  const StreamEndpoint& received = decoded.endpoint;
  EXPECT_EQ(decoded.capabilities, 0);
  EXPECT_EQ(received.ring_address, sent.ring_address);
  EXPECT_EQ(received.ring_key, sent.ring_key);
  EXPECT_EQ(received.ring_size, sent.ring_size);
  EXPECT_EQ(received.notification_capacity, sent.notification_capacity);
}

TEST(VerbsHelloTest, IsBigEndianWithMagicAndVersionFirst) {
  const EncodedHello hello = encode_hello({{0x0102030405060708, 0x11223344, 0x2000, 256}, 0});
  const std::vector<uint8_t> expected_start = {'q', 'p', 's', 'v', 0, 1, 0, 0,
                                               1,   2,   3,   4,   5, 6, 7, 8};
  EXPECT_TRUE(std::equal(expected_start.begin(), expected_start.end(), hello.begin()));
  EXPECT_EQ(hello[24], 0x11);  // ring key
  EXPECT_EQ(hello[31], 0);     // notification capacity 256, low byte
  EXPECT_EQ(hello[30], 1);
}

TEST(VerbsHelloTest, ReadsOnlyItsOwnBytesOfLongerPrivateData) {
  // A REQ's private data reaches the listener padded to 56 bytes.
  std::vector<uint8_t> padded(kLargestConnectPrivateData, 0);
  const EncodedHello hello = encode_hello({{4096, 7, 65536, 64}, 0});
  std::memcpy(padded.data(), hello.data(), hello.size());
  ConnectionHello received;
  ASSERT_EQ(decode_hello(padded.data(), padded.size(), received), 0);
  EXPECT_EQ(received.endpoint.ring_size, 65536u);
}

TEST(VerbsHelloTest, RefusesWhatIsNotAHelloOfThisVersion) {
  EncodedHello hello = encode_hello({{4096, 7, 65536, 64}, 0});
  ConnectionHello received;
  EXPECT_EQ(decode_hello(nullptr, 0, received), -EPROTO);
  EXPECT_EQ(decode_hello(hello.data(), hello.size() - 1, received), -EPROTO);
  EncodedHello other_version = hello;
  other_version[5] = 2;
  EXPECT_EQ(decode_hello(other_version.data(), other_version.size(), received), -EPROTO);
  EncodedHello not_ours = hello;
  not_ours[0] = 'x';
  EXPECT_EQ(decode_hello(not_ours.data(), not_ours.size(), received), -EPROTO);
  // Capability bits it does not know are no reason to refuse.
  hello[7] = 0x80;
  EXPECT_EQ(decode_hello(hello.data(), hello.size(), received), 0);
}

TEST(VerbsHelloTest, CarriesTheReadsUnreliableCapability) {
  const EncodedHello hello = encode_hello({{4096, 7, 65536, 64}, kHelloReadsUnreliable});
  EXPECT_EQ(hello[6], 0);
  EXPECT_EQ(hello[7], 1);  // bit 0, big-endian
  ConnectionHello received;
  ASSERT_EQ(decode_hello(hello.data(), hello.size(), received), 0);
  EXPECT_EQ(received.capabilities, kHelloReadsUnreliable);
}

TEST(VerbsConnectionTest, APeerWithUnreliableReadsTurnsReadRendezvousOff) {
  stream::StreamSettings settings;
  settings.rendezvous_threshold = 128 << 10;
  VerbsConnection connection;  // no transport of ours: only the peer's hello counts
  EXPECT_EQ(connection.stream_settings(settings).rendezvous_threshold, uint64_t{128} << 10);
  EXPECT_EQ(connection.stream_settings(settings).rendezvous_method, stream::RendezvousMethod::read);
  connection.peer_capabilities = kHelloReadsUnreliable;
  EXPECT_EQ(connection.stream_settings(settings).rendezvous_threshold, stream::kNoRendezvous);
  // A capability it does not know changes nothing.
  connection.peer_capabilities = 0x8000;
  EXPECT_EQ(connection.stream_settings(settings).rendezvous_threshold, uint64_t{128} << 10);
}

TEST(VerbsConnectionTest, APeerThatTakesWriteRequestsGetsRendezvousByWriteEvenOverSoftRoce) {
  stream::StreamSettings settings;
  settings.rendezvous_threshold = 128 << 10;
  VerbsConnection connection;
  for (uint16_t reads : {uint16_t{0}, kHelloReadsUnreliable}) {
    connection.peer_capabilities = static_cast<uint16_t>(kHelloRendezvousByWrite | reads);
    const stream::StreamSettings used = connection.stream_settings(settings);
    EXPECT_EQ(used.rendezvous_method, stream::RendezvousMethod::write);
    EXPECT_EQ(used.rendezvous_threshold, uint64_t{128} << 10);
  }
}

TEST(VerbsHelloTest, CarriesTheRendezvousByWriteCapability) {
  const EncodedHello hello =
      encode_hello({{4096, 7, 65536, 64}, kHelloReadsUnreliable | kHelloRendezvousByWrite});
  EXPECT_EQ(hello[7], 3);
  ConnectionHello received;
  ASSERT_EQ(decode_hello(hello.data(), hello.size(), received), 0);
  EXPECT_EQ(received.capabilities, kHelloReadsUnreliable | kHelloRendezvousByWrite);
}

TEST(VerbsPostLedgerTest, NamesCompletionsInPostOrder) {
  PostLedger ledger(3);
  const uint64_t first = ledger.next_id();
  ledger.push({CompletionKind::write_done, 100});
  const uint64_t second = ledger.next_id();
  ledger.push({CompletionKind::read_done, 200});
  EXPECT_EQ(ledger.in_flight(), 2u);
  PostLedger::Entry entry{};
  EXPECT_FALSE(ledger.pop(second, entry));  // not the oldest
  ASSERT_TRUE(ledger.pop(first, entry));
  EXPECT_EQ(entry.kind, CompletionKind::write_done);
  EXPECT_EQ(entry.cookie, 100u);
  ASSERT_TRUE(ledger.pop(second, entry));
  EXPECT_EQ(entry.kind, CompletionKind::read_done);
  EXPECT_EQ(entry.cookie, 200u);
  EXPECT_FALSE(ledger.pop(second + 1, entry));  // nothing in flight
}

TEST(VerbsPostLedgerTest, IsFullAtItsCapacityAndWrapsAround) {
  PostLedger ledger(2);
  for (uint64_t round = 0; round < 10; ++round) {
    const uint64_t id = ledger.next_id();
    ledger.push({CompletionKind::write_done, round});
    ledger.push({CompletionKind::write_done, round + 1000});
    EXPECT_TRUE(ledger.full());
    PostLedger::Entry entry{};
    ASSERT_TRUE(ledger.pop(id, entry));
    EXPECT_EQ(entry.cookie, round);
    ASSERT_TRUE(ledger.pop(id + 1, entry));
    EXPECT_EQ(entry.cookie, round + 1000);
    EXPECT_FALSE(ledger.full());
  }
  EXPECT_LT(ledger.next_id(), kReceiveWorkRequestId);
}

TEST(VerbsRegistrationTest, AccessFlagsFollowWhatThePeerMayDo) {
  EXPECT_EQ(access_flags(MemoryAccess::remote_write),
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  // A rendezvous source may be read-only memory: no write access.
  EXPECT_EQ(access_flags(MemoryAccess::remote_read), IBV_ACCESS_REMOTE_READ);
  EXPECT_EQ(access_flags(MemoryAccess::local_only), IBV_ACCESS_LOCAL_WRITE);
}

TEST(VerbsOptionsTest, DefaultsAreValidAndTooFewReceivesAreNot) {
  VerbsOptions options;
  EXPECT_TRUE(options_valid(options));
  options.notification_capacity = 3;  // fewer than the notification window reserves
  EXPECT_FALSE(options_valid(options));
  options = {};
  options.max_slices = 3;
  EXPECT_FALSE(options_valid(options));
  options = {};
  options.max_read_length = 0;
  EXPECT_FALSE(options_valid(options));
}

}  // namespace
}  // namespace qpsock::transport::verbs
