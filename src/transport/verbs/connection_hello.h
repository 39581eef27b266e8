// The private data of the rdma_cm connect (REQ) and accept (REP): a small
// versioned header and the sender's StreamEndpoint, so that the two Streams
// connect from the CM exchange alone, with no first message.
//
// 32 bytes, big-endian, within RC connect's 56-byte private-data limit (the
// REQ's 92 less rdma_cm's own 36-byte header; an accept may carry 196):
//
//   offset  size  field
//        0     4  magic "qpsv" (0x71707376)
//        4     2  version (1)
//        6     2  capabilities (kHelloReadsUnreliable,
//                 kHelloRendezvousByWrite); a receiver ignores
//                 bits it does not know, so a later version can offer more
//        8     8  ring address (the peer's virtual address of our ring)
//       16     8  ring size
//       24     4  ring key (rkey)
//       28     4  notification capacity (our pre-posted receives)
//
// The CM may hand the receiver more bytes than were sent (a REQ's private
// data arrives padded with zeros): only the first 32 are read.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "stream/stream.h"

namespace qpsock::transport::verbs {

inline constexpr uint32_t kHelloMagic = 0x71707376;  // "qpsv"
inline constexpr uint16_t kHelloVersion = 1;
inline constexpr size_t kHelloSize = 32;
inline constexpr size_t kLargestConnectPrivateData = 56;
static_assert(kHelloSize <= kLargestConnectPrivateData);

// Capability bit: the sender's device may fail the queue pair when an RDMA
// read is retransmitted (Soft-RoCE, see VerbsTransport::reads_unreliable):
// neither end sends rendezvous writes, which the receiver would pull by reads.
inline constexpr uint16_t kHelloReadsUnreliable = 1u << 0;
// Capability bit: the sender's ring is followed by a request box in the same
// registration (stream/record.h, kRequestBoxSize) and it moves rendezvous
// by RDMA WRITE as the receiver asks (stream::RendezvousMethod::write). When
// both hellos have it, the streams use that method, and need no reads.
inline constexpr uint16_t kHelloRendezvousByWrite = 1u << 1;

using EncodedHello = std::array<uint8_t, kHelloSize>;

struct ConnectionHello {
  stream::StreamEndpoint endpoint{};
  uint16_t capabilities = 0;
};

EncodedHello encode_hello(const ConnectionHello& hello);
// 0 with `hello` set, or -EPROTO: too short, not ours, or another version.
int decode_hello(const void* data, size_t length, ConnectionHello& hello);

}  // namespace qpsock::transport::verbs
