// The lock-free connection registry under threads that attach, dup, detach and
// look up the same fds at once: every lookup gets a live Connection that was on
// that fd, and every Connection is freed once no fd refers to it. Run under
// ThreadSanitizer and AddressSanitizer by the suite.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "upgrade/connection_registry.h"

namespace qpsock::upgrade {
namespace {

constexpr int kFirstFd = 900;
constexpr int kFds = 8;

TEST(ConnectionRegistryConcurrency, LookupsRacingAttachAndDetachSeeOnlyLiveConnections) {
  std::mutex made_mutex;
  std::vector<std::weak_ptr<Connection>> made;
  std::atomic<bool> stop{false};
  std::atomic<long> found{0};

  std::vector<std::thread> writers;
  for (int writer = 0; writer < 2; ++writer) {
    writers.emplace_back([&, writer] {
      // At least as long as the readers need to find connections often (on
      // two cores they may start late).
      for (int round = 0; round < 20000 || (found.load() < 1000 && round < 4000000); ++round) {
        const int fd = kFirstFd + (round + writer) % kFds;
        switch (round % 4) {
          case 0: {
            auto connection = std::make_shared<Connection>(config::Role::server);
            {
              std::lock_guard lock(made_mutex);
              made.push_back(connection);
            }
            attach_connection(fd, std::move(connection));
            break;
          }
          case 1: copy_connection(fd, kFirstFd + (fd + 3) % kFds); break;
          default: detach_connection(fd); break;
        }
      }
    });
  }
  std::vector<std::thread> readers;
  for (int reader = 0; reader < 2; ++reader) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        for (int fd = kFirstFd; fd < kFirstFd + kFds; ++fd) {
          if (auto connection = find_connection(fd)) {
            // Touch it: a freed Connection is what the sanitizers would catch.
            if (connection->role() == config::Role::server) found.fetch_add(1);
          }
        }
      }
    });
  }
  for (auto& writer : writers) writer.join();
  stop.store(true);
  for (auto& reader : readers) reader.join();
  for (int fd = kFirstFd; fd < kFirstFd + kFds; ++fd) detach_connection(fd);

  EXPECT_GE(found.load(), 1000);
  for (const auto& connection : made) EXPECT_TRUE(connection.expired()) << "a Connection leaked";
}

}  // namespace
}  // namespace qpsock::upgrade
