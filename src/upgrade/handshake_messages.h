// The side channel's messages (docs/upgrade-protocol.md). Fixed-size and
// native-endian: on one host both ends share the byte order; the RDMA stage
// carries its own in rdma_cm's private data.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>

namespace qpsock::upgrade {

// 2: a rendezvous written by its sender is not answered with rendezvous_done.
// 3: the shm hello carries the link's doorbell (one per pair of processes).
inline constexpr uint32_t kProtocolVersion = 3;
inline constexpr uint64_t kHelloMagic = 0x316b636f73707100ull;  // "\0qpsock1"
inline constexpr uint64_t kSwitchMagic = 0x6863746977737100ull;  // "\0qswitch"

using BindingToken = std::array<uint8_t, 16>;

struct Hello {
  uint64_t magic;
  uint32_t version;
  // The sender's fd number of its end of the TCP connection, plus one (0:
  // not given): where the receiver looks first for the socket in
  // /proc/PID/fd, before reading all of it (a JVM holds thousands of fds).
  uint32_t socket_fd_hint;
  int32_t pid;            // checked against SO_PEERCRED
  int32_t accepted;       // client's answer: 1 upgrade, 0 declined (then the channel closes)
  BindingToken token;     // what the peer must write into TCP at its switch
};

// The first 16 bytes of each direction of the stream: how many bytes of the
// application's went over TCP before the switch. The binding token follows
// them in TCP.
struct SwitchHeader {
  uint64_t magic;
  uint64_t tcp_bytes;
};

}  // namespace qpsock::upgrade
