// Helpers for the shm transport's tests (header-only): establishing two
// connected ShmTransports in one process, and counting the arena mappings
// left in this process.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "common/log.h"
#include "transport/shm/shm_transport.h"

namespace qpsock::transport::shm::testing {

// Mappings of a qpsock pool memfd in this process ("/memfd:qpsock-pool (deleted)").
inline int arena_mappings() {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);)
    if (line.find("memfd:qpsock-pool (deleted)") != std::string::npos) ++count;
  return count;
}

// Whether arena_mappings() comes to `count` within `limit`: a link's pools
// go when the link does, which its background sweep (once a second) or the
// loop's hearing of its peer's exit decides.
inline bool arena_mappings_become(int count, std::chrono::seconds limit = std::chrono::seconds{5}) {
  const auto give_up = std::chrono::steady_clock::now() + limit;
  while (arena_mappings() != count) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds{2});
  }
  return true;
}

// A connected AF_UNIX stream socketpair, closed when it goes.
struct SocketPair {
  SocketPair() { ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds); }
  ~SocketPair() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  SocketPair(const SocketPair&) = delete;
  SocketPair& operator=(const SocketPair&) = delete;
  int fds[2] = {-1, -1};
};

struct EstablishResults {
  int first = 0;
  int second = 0;
};

// Both ends in this process (peer pid = our own): the initiator on a thread.
inline EstablishResults establish_in_process(const SocketPair& sockets,
                                             const ShmOptions& first_options,
                                             const ShmOptions& second_options,
                                             std::unique_ptr<ShmTransport>& first,
                                             std::unique_ptr<ShmTransport>& second,
                                             ShmRole second_role = ShmRole::responder) {
  EstablishResults results;
  // Both ends may log a failure at once; log.cc reads its settings lazily,
  // and not thread-safely, on first use: have that happen here, first.
  log::enabled(log::Level::warn);
  std::thread initiator([&] {
    results.first = ShmTransport::establish(sockets.fds[0], ShmRole::initiator, ::getpid(),
                                            first_options, first);
  });
  results.second =
      ShmTransport::establish(sockets.fds[1], second_role, ::getpid(), second_options, second);
  initiator.join();
  return results;
}

// establish_in_process, which must succeed on both sides (gtest ASSERTs).
inline void establish_both(const SocketPair& sockets, const ShmOptions& options,
                           std::unique_ptr<ShmTransport>& first,
                           std::unique_ptr<ShmTransport>& second) {
  const auto results = establish_in_process(sockets, options, options, first, second);
  ASSERT_EQ(results.first, 0);
  ASSERT_EQ(results.second, 0);
}

}  // namespace qpsock::transport::shm::testing
