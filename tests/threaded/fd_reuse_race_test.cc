// The application closes an upgraded socket while qpsock's helpers still
// hold its connection (the doorbell watcher answering the peer, the
// stream's control probe), and the kernel gives the number to a new socket
// at once: nothing of qpsock's may read, write or poll the new socket. Each
// round closes through qpsock's close, puts a fresh socket at the same
// number, and checks that every byte sent to it arrives (docs/architecture.md,
// "Descriptor numbers qpsock keeps"). Before the fence, a watcher thread's
// doorbell read took the new socket's first bytes within a few rounds.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "sockets/socket_lifecycle.h"
#include "support/upgraded_pair.h"
#include "upgrade/connection_registry.h"

namespace qpsock::upgrade {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kPayload = 48 * 1024;

std::vector<char> pattern(unsigned seed) {
  std::vector<char> bytes(kPayload);
  for (size_t index = 0; index < bytes.size(); ++index)
    bytes[index] = static_cast<char>((index * 131 + seed * 7 + (index >> 8)) & 0xff);
  return bytes;
}

// Every byte of `expected`, read from `fd` within two seconds, nothing else.
void expect_all_bytes(int fd, const std::vector<char>& expected) {
  std::vector<char> got;
  got.reserve(expected.size());
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  char buffer[8192];
  while (got.size() < expected.size() && Clock::now() < deadline) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n > 0) got.insert(got.end(), buffer, buffer + n);
    else std::this_thread::yield();
  }
  ASSERT_EQ(got.size(), expected.size()) << "bytes of the new socket at the reused number were taken";
  EXPECT_TRUE(got == expected) << "the new socket's bytes arrived changed";
}

// The client's first write switches the server's receiving direction: from
// then on its TCP socket is a control channel that the watcher reads.
void switch_server_receiving(testing::UpgradedPair& pair) {
  char text[] = "switch";
  iovec piece{text, sizeof(text)};
  ASSERT_EQ(pair.client->send(pair.client_fd.get(), {&piece, 1}, MSG_NOSIGNAL),
            static_cast<ssize_t>(sizeof(text)));
  char got[sizeof(text)];
  size_t done = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (done < sizeof(text) && Clock::now() < deadline) {
    iovec into{got + done, sizeof(got) - done};
    const ssize_t n = pair.server->receive(pair.server_fd.get(), {&into, 1}, MSG_DONTWAIT);
    if (n > 0) done += static_cast<size_t>(n);
  }
  ASSERT_EQ(done, sizeof(text));
  ASSERT_TRUE(pair.server->receiving_switched());
}

// A fresh connected socket pair with one end at number `fd` (just closed,
// so the kernel most often gives it back itself): the other end, the one
// the test writes into, is returned.
int new_socket_at(int fd, UniqueFd& at_number) {
  int ends[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, ends), 0);
  if (ends[1] == fd) std::swap(ends[0], ends[1]);
  if (ends[0] != fd) {
    EXPECT_EQ(::dup2(ends[0], fd), fd);
    ::close(ends[0]);
  }
  at_number = UniqueFd(fd);
  return ends[1];
}

// Runs `rounds` rounds (or until two seconds have gone) of: an upgraded
// pair, a thread answering the server's doorbells as the watcher does, the
// server's socket closed (moved first to a second number when `dup_first`)
// and its number given to a new socket that must get every byte sent to it.
void storm(int rounds, bool dup_first) {
  const auto stop_at = Clock::now() + std::chrono::seconds(2);
  for (int round = 0; round < rounds && Clock::now() < stop_at; ++round) {
    testing::UpgradedPair pair;
    ASSERT_NO_FATAL_FAILURE(testing::make_upgraded_pair(pair));
    const int number = pair.server_fd.get();
    attach_connection(number, pair.server);
    ASSERT_NO_FATAL_FAILURE(switch_server_receiving(pair));
    int second = -1;
    if (dup_first) {
      second = sockets::dup(number);
      ASSERT_GE(second, 0);
    }

    std::atomic<bool> stop{false};
    std::thread watcher([connection = pair.server, &stop] {
      while (!stop.load(std::memory_order_relaxed)) connection->answer_doorbell();
    });
    // The peer rings meanwhile, as a withdrawn rendezvous would.
    stream::ring_doorbell(keep_fd(pair.client_fd.get()));

    ASSERT_EQ(sockets::close(pair.server_fd.release()), 0);
    UniqueFd at_number;
    UniqueFd writer(new_socket_at(number, at_number));
    const std::vector<char> sent = pattern(static_cast<unsigned>(round));
    ASSERT_EQ(::send(writer.get(), sent.data(), sent.size(), 0), static_cast<ssize_t>(sent.size()));
    expect_all_bytes(number, sent);
    stop.store(true);
    watcher.join();
    // Nothing of qpsock's was written into the new socket either.
    char stray;
    EXPECT_EQ(::recv(writer.get(), &stray, 1, MSG_DONTWAIT), -1) << "a byte was written into the new socket";

    if (second >= 0) {
      // The connection lives on at the second number, and its doorbells are taken there.
      EXPECT_EQ(pair.server->control().fd, second);
      stream::ring_doorbell(keep_fd(pair.client_fd.get()));
      // Taken there within two seconds, by this call or by the process's
      // own doorbell watcher, which watches the new number too.
      const auto give_up = Clock::now() + std::chrono::seconds(2);
      bool left = true;
      while (left && Clock::now() < give_up) {
        pair.server->answer_doorbell();
        left = ::recv(second, &stray, 1, MSG_DONTWAIT | MSG_PEEK) == 1;
        if (left) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      EXPECT_FALSE(left) << "the doorbell was left unread";
      ASSERT_EQ(sockets::close(second), 0);
    }
    pair.server_fd = std::move(at_number);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(FdReuseRace, ANumberClosedUnderTheDoorbellWatcherIsNeverReadAgain) {
  storm(400, false);
}

TEST(FdReuseRace, AConnectionMovedToAnotherNumberIsWatchedThereAndTheOldNumberIsLeftAlone) {
  storm(400, true);
}

}  // namespace
}  // namespace qpsock::upgrade
