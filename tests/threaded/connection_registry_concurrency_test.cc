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

// Claims of an offer racing its close and each other (a server's threads,
// a signal handler): one Connection at most is made from it, every claim
// that gets one gets that one, and none is left attached once closed.
TEST(ConnectionRegistryConcurrency, ClaimsRacingEachOtherAndACloseMakeOneConnection) {
  constexpr int kFd = kFirstFd + kFds + 1;
  for (int round = 0; round < 2000; ++round) {
    offer_unclaimed(kFd);
    std::atomic<Connection*> claimed_by[2] = {nullptr, nullptr};
    std::atomic<int> prepared{0};
    std::shared_ptr<Connection> closed;
    std::vector<std::thread> threads;
    for (int claimer = 0; claimer < 2; ++claimer) {
      threads.emplace_back([&, claimer] {
        ConnectionHold hold = claim_offer(kFd, [&](Connection&) { prepared.fetch_add(1); });
        if (hold) claimed_by[claimer].store(&*hold);
      });
    }
    threads.emplace_back([&] {
      if (round % 2 == 0) closed = detach_connection(kFd);
    });
    for (auto& thread : threads) thread.join();
    Connection* first = claimed_by[0].load();
    Connection* second = claimed_by[1].load();
    if (first != nullptr && second != nullptr) {
      EXPECT_EQ(first, second);
    }
    if (round % 2 != 0) closed = detach_connection(kFd);
    if (closed != nullptr) {
      EXPECT_FALSE(connection_in_use(closed.get()));
    }
    EXPECT_EQ(find_connection(kFd), nullptr);
  }
}

}  // namespace
}  // namespace qpsock::upgrade
