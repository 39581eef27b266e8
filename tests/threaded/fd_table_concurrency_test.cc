// The fd table under many threads: the tests ThreadSanitizer runs.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <atomic>
#include <csignal>
#include <thread>
#include <vector>

#include "sockets/data_transfer.h"
#include "sockets/fd_table.h"
#include "sockets/socket_lifecycle.h"

namespace qpsock::sockets {
namespace {

TEST(FdTableConcurrency, ThreadsOnDisjointFdsNeverSeeEachOthersRecords) {
  FdTable table(4096);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int thread_index = 0; thread_index < 8; ++thread_index) {
    threads.emplace_back([&, thread_index] {
      for (int round = 0; round < 2000; ++round) {
        int fd = thread_index * 100 + round % 100;
        uint64_t generation = table.track_new(fd, SocketKind::tcp, AF_INET);
        int copy = fd + 1000;
        table.copy(fd, copy);
        if (table.lookup(copy).generation != generation) ++mismatches;
        table.forget(fd);
        table.forget(copy);
        if (table.lookup(fd).tracked()) ++mismatches;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(FdTableConcurrency, ReadersSeeWholeRecordsWhileWritersChurn) {
  FdTable table(64);
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  std::thread writer([&] {
    for (int round = 0; round < 20000; ++round) {
      table.track_new(7, SocketKind::tcp, round % 2 ? AF_INET : AF_INET6);
      table.copy(8, 7);
    }
    stop = true;
  });
  std::thread reader([&] {
    while (!stop) {
      FdRecord record = table.lookup(7);
      bool whole = !record.tracked() ? record.generation == 0
                                     : (record.family == AF_INET || record.family == AF_INET6) &&
                                           record.generation != 0;
      if (!whole) ++torn;
    }
  });
  writer.join();
  reader.join();
  EXPECT_EQ(torn.load(), 0);
}

void ignore_signal(int) {}

// True once thread `tid` of this process sleeps in system call `number`
// (/proc/self/task/TID/syscall starts with the number); false after 10 s.
bool wait_until_in_syscall(pid_t tid, long number) {
  const std::string path = "/proc/self/task/" + std::to_string(tid) + "/syscall";
  for (int attempt = 0; attempt < 10000; ++attempt) {
    if (FILE* file = std::fopen(path.c_str(), "r")) {
      long current = -1;
      const int scanned = std::fscanf(file, "%ld", &current);
      std::fclose(file);
      if (scanned == 1 && current == number) return true;
    }
    usleep(1000);
  }
  return false;
}

// The JVM's close idiom: another thread dup2s a placeholder over a socket that
// a reader is blocked on, then signals the reader.
TEST(FdTableConcurrency, Dup2OverASocketWithABlockedReader) {
  struct sigaction action {};
  action.sa_handler = ignore_signal;  // no SA_RESTART: the read returns EINTR
  ASSERT_EQ(sigaction(SIGUSR1, &action, nullptr), 0);
  for (int round = 0; round < 20; ++round) {
    int pair[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    int fd = sockets::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    // Reading an unconnected TCP socket fails at once; make the reader block
    // on something real instead: a socketpair end dup2'd onto the tracked fd.
    ASSERT_EQ(sockets::dup2(pair[0], fd), fd);
    FdTable::process_table().track_new(fd, SocketKind::tcp, AF_INET);
    std::atomic<pid_t> reader_tid{0};
    std::atomic<int> read_errno{0};
    std::atomic<ssize_t> read_result{0};
    std::atomic<bool> returned{false};
    std::thread reader([&] {
      char byte;
      reader_tid = gettid();
      errno = 0;
      read_result = sockets::read(fd, &byte, 1);
      read_errno = errno;
      returned = true;
    });
    // The idiom only matters for a reader already asleep in the kernel: wait
    // until the thread is really inside read(2) (a fixed sleep is not enough
    // under ThreadSanitizer).
    while (reader_tid == 0) std::this_thread::yield();
    ASSERT_TRUE(wait_until_in_syscall(reader_tid, SYS_read));
    int placeholder[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, placeholder), 0);
    ::close(placeholder[1]);
    ASSERT_EQ(sockets::dup2(placeholder[0], fd), fd);
    EXPECT_FALSE(FdTable::process_table().lookup(fd).tracked());
    // Keep signalling until the reader is out (the signal may land before it blocks).
    while (!returned) {
      pthread_kill(reader.native_handle(), SIGUSR1);
      usleep(1000);
    }
    reader.join();
    EXPECT_EQ(read_result, -1);
    EXPECT_EQ(read_errno.load(), EINTR);
    for (int each : {fd, pair[0], pair[1], placeholder[0]}) sockets::close(each);
  }
}

}  // namespace
}  // namespace qpsock::sockets
