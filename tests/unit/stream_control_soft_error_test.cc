// An ICMP error on a TCP connection whose socket has IP_RECVERR set (host
// unreachable, say) is read once as an error, yet the kernel keeps the
// connection open and retransmitting: the control channel must not take it
// for the peer's end. Made real here: a loopback connection and an ICMP
// "host unreachable" quoting its next sequence number, sent through a raw
// socket (root only; skipped otherwise).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip_icmp.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "stream/control_doorbell.h"
#include "support/loopback_tcp_connection.h"

namespace qpsock::stream {
namespace {

uint16_t internet_checksum(const void* data, size_t length) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint32_t sum = 0;
  for (size_t index = 0; index + 1 < length; index += 2)
    sum += (bytes[index] << 8) | bytes[index + 1];
  if (length % 2 != 0) sum += bytes[length - 1] << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return htons(static_cast<uint16_t>(~sum));
}

class ControlSoftErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    raw_ = socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);
    if (raw_ < 0) GTEST_SKIP() << "no raw socket (not root): " << strerror(errno);
    ASSERT_NO_FATAL_FAILURE(testing::connect_over_loopback(ours_, peers_));
    const int on = 1;
    ASSERT_EQ(setsockopt(ours_, IPPROTO_IP, IP_RECVERR, &on, sizeof(on)), 0);
  }
  void TearDown() override {
    for (int fd : {raw_, ours_, peers_})
      if (fd >= 0) close(fd);
  }

  // Our socket's next sequence number (nothing is in flight: it is also the
  // oldest unacknowledged one, the only one an ICMP error may quote), read
  // in repair mode.
  uint32_t next_sequence() {
    int on = 1;
    EXPECT_EQ(setsockopt(ours_, IPPROTO_TCP, TCP_REPAIR, &on, sizeof(on)), 0) << strerror(errno);
    int queue = TCP_SEND_QUEUE;
    EXPECT_EQ(setsockopt(ours_, IPPROTO_TCP, TCP_REPAIR_QUEUE, &queue, sizeof(queue)), 0);
    uint32_t sequence = 0;
    socklen_t length = sizeof(sequence);
    EXPECT_EQ(getsockopt(ours_, IPPROTO_TCP, TCP_QUEUE_SEQ, &sequence, &length), 0);
    int off = 0;
    EXPECT_EQ(setsockopt(ours_, IPPROTO_TCP, TCP_REPAIR, &off, sizeof(off)), 0);
    return sequence;
  }

  // An ICMP "host unreachable" for our connection, as a router would send it.
  void send_host_unreachable() {
    sockaddr_in local{}, remote{};
    socklen_t length = sizeof(local);
    ASSERT_EQ(getsockname(ours_, reinterpret_cast<sockaddr*>(&local), &length), 0);
    length = sizeof(remote);
    ASSERT_EQ(getpeername(ours_, reinterpret_cast<sockaddr*>(&remote), &length), 0);
    struct {
      icmphdr icmp;
      iphdr quoted_ip;
      uint16_t source_port, destination_port;
      uint32_t sequence;
    } __attribute__((packed)) packet{};
    packet.icmp.type = ICMP_DEST_UNREACH;
    packet.icmp.code = ICMP_HOST_UNREACH;
    packet.quoted_ip.version = 4;
    packet.quoted_ip.ihl = 5;
    packet.quoted_ip.ttl = 64;
    packet.quoted_ip.protocol = IPPROTO_TCP;
    packet.quoted_ip.tot_len = htons(40);
    packet.quoted_ip.saddr = local.sin_addr.s_addr;
    packet.quoted_ip.daddr = remote.sin_addr.s_addr;
    packet.quoted_ip.check = internet_checksum(&packet.quoted_ip, sizeof(packet.quoted_ip));
    packet.source_port = local.sin_port;
    packet.destination_port = remote.sin_port;
    packet.sequence = htonl(next_sequence());
    packet.icmp.checksum = internet_checksum(&packet, sizeof(packet));
    ASSERT_EQ(sendto(raw_, &packet, sizeof(packet), 0, reinterpret_cast<sockaddr*>(&local),
                     sizeof(local)),
              static_cast<ssize_t>(sizeof(packet)));
  }

  // Waits (up to a second) for the report to reach our socket (poll shows
  // it as POLLERR and leaves it there).
  bool error_pending() {
    for (int tries = 0; tries < 100; ++tries) {
      pollfd entry{ours_, POLLIN, 0};
      if (poll(&entry, 1, 10) > 0 && (entry.revents & POLLERR) != 0) return true;
    }
    return false;
  }

  int raw_ = -1;
  int ours_ = -1;
  int peers_ = -1;
};

TEST_F(ControlSoftErrorTest, TheKernelReportsItOnceAndKeepsTheConnection) {
  // What the test relies on, without qpsock: a read sees the error once, then the connection works.
  send_host_unreachable();
  ASSERT_TRUE(error_pending())
      << "the ICMP report never reached the socket: the test proves nothing";
  char byte;
  EXPECT_EQ(recv(ours_, &byte, 1, MSG_DONTWAIT | MSG_PEEK), -1);
  EXPECT_EQ(errno, EHOSTUNREACH);
  ASSERT_EQ(send(peers_, "x", 1, 0), 1);
  usleep(20000);
  EXPECT_EQ(recv(ours_, &byte, 1, MSG_DONTWAIT), 1);
}

TEST_F(ControlSoftErrorTest, BeforeTheSwitchTheConnectionIsNotGone) {
  send_host_unreachable();
  ASSERT_TRUE(error_pending());
  int error = 0;
  errno = 55;
  EXPECT_EQ(read_control_state(keep_fd(ours_), DoorbellsPossible::no, &error), ControlState::quiet);
  EXPECT_EQ(errno, 55);
}

TEST_F(ControlSoftErrorTest, AfterTheSwitchDoorbellsAreStillTaken) {
  ring_doorbell(keep_fd(peers_));
  usleep(20000);
  send_host_unreachable();
  ASSERT_TRUE(error_pending());
  EXPECT_EQ(take_doorbells(keep_fd(ours_)), ControlState::quiet);
  char byte;
  EXPECT_EQ(recv(ours_, &byte, 1, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN) << "the doorbell was left unread";
  // A reset still ends it.
  const linger abortive{1, 0};
  ASSERT_EQ(setsockopt(peers_, SOL_SOCKET, SO_LINGER, &abortive, sizeof(abortive)), 0);
  close(peers_);
  peers_ = -1;
  usleep(20000);
  int error = 0;
  EXPECT_EQ(take_doorbells(keep_fd(ours_), &error), ControlState::gone);
  EXPECT_EQ(error, ECONNRESET);
}

}  // namespace
}  // namespace qpsock::stream
