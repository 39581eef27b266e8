#include "transport/verbs/connection_hello.h"

#include <endian.h>

#include <cerrno>
#include <cstring>

namespace qpsock::transport::verbs {
namespace {

constexpr size_t kMagicAt = 0;
constexpr size_t kVersionAt = 4;
constexpr size_t kCapabilitiesAt = 6;
constexpr size_t kRingAddressAt = 8;
constexpr size_t kRingSizeAt = 16;
constexpr size_t kRingKeyAt = 24;
constexpr size_t kNotificationCapacityAt = 28;

template <typename Value>
void store(EncodedHello& hello, size_t at, Value value) {
  std::memcpy(hello.data() + at, &value, sizeof(value));
}

template <typename Value>
Value load(const uint8_t* bytes, size_t at) {
  Value value;
  std::memcpy(&value, bytes + at, sizeof(value));
  return value;
}

}  // namespace

EncodedHello encode_hello(const ConnectionHello& sent) {
  const stream::StreamEndpoint& endpoint = sent.endpoint;
  EncodedHello hello{};
  store(hello, kMagicAt, htobe32(kHelloMagic));
  store(hello, kVersionAt, htobe16(kHelloVersion));
  store(hello, kCapabilitiesAt, htobe16(sent.capabilities));
  store(hello, kRingAddressAt, htobe64(endpoint.ring_address));
  store(hello, kRingSizeAt, htobe64(endpoint.ring_size));
  store(hello, kRingKeyAt, htobe32(endpoint.ring_key));
  store(hello, kNotificationCapacityAt, htobe32(endpoint.notification_capacity));
  return hello;
}

int decode_hello(const void* data, size_t length, ConnectionHello& hello) {
  if (data == nullptr || length < kHelloSize) return -EPROTO;
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (be32toh(load<uint32_t>(bytes, kMagicAt)) != kHelloMagic ||
      be16toh(load<uint16_t>(bytes, kVersionAt)) != kHelloVersion)
    return -EPROTO;
  stream::StreamEndpoint& endpoint = hello.endpoint;
  hello.capabilities = be16toh(load<uint16_t>(bytes, kCapabilitiesAt));
  endpoint.ring_address = be64toh(load<uint64_t>(bytes, kRingAddressAt));
  endpoint.ring_size = be64toh(load<uint64_t>(bytes, kRingSizeAt));
  endpoint.ring_key = be32toh(load<uint32_t>(bytes, kRingKeyAt));
  endpoint.notification_capacity = be32toh(load<uint32_t>(bytes, kNotificationCapacityAt));
  return 0;
}

}  // namespace qpsock::transport::verbs
