// Helpers for tests that run a Stream between two real processes over any
// transport (header-only): a forked child that is always killed and reaped,
// and pattern transfers checked byte by byte, both ways at once.
//
// Fork happens while the test process is single-threaded (ThreadSanitizer
// refuses threads in a child forked from a multi-threaded process): start
// watchdogs and workers after ChildProcess.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "stream/stream.h"
#include "support/stream_test_support.h"

namespace qpsock::stream::testing {

// The process tests' volume: a quarter under the sanitizers.
inline constexpr uint64_t process_volume(uint64_t bytes) {
#if defined(__SANITIZE_ADDRESS__) || defined(QPSOCK_TESTING_UNDER_TSAN)
  return bytes / 4;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return bytes / 4;
#else
  return bytes;
#endif
#else
  return bytes;
#endif
}

// A forked child running `body` and exiting with what it returns. Killed
// (SIGKILL) and reaped when this goes, if it has not been reaped yet; it
// also dies with us (PR_SET_PDEATHSIG), should our watchdog abort us.
class ChildProcess {
 public:
  explicit ChildProcess(const std::function<int()>& body) {
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(99);
      ::_exit(body());
    }
  }
  ~ChildProcess() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  void kill_now() { ::kill(pid_, SIGKILL); }
  // Its exit code, or -1 if it was killed or did not exit within `limit`.
  int wait(std::chrono::milliseconds limit) {
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    pollfd exited{pidfd, POLLIN, 0};
    const bool done = pidfd >= 0 && ::poll(&exited, 1, static_cast<int>(limit.count())) == 1;
    if (pidfd >= 0) ::close(pidfd);
    if (!done) return -1;
    int status = 0;
    if (::waitpid(pid_, &status, 0) != pid_) return -1;
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

inline bool send_all(int fd, const void* data, size_t length) {
  return ::send(fd, data, length, MSG_NOSIGNAL) == static_cast<ssize_t>(length);
}
inline bool receive_all(int fd, void* data, size_t length) {
  return ::recv(fd, data, length, MSG_WAITALL) == static_cast<ssize_t>(length);
}

// Both processes call it when done, so neither closes while the other still reads.
inline bool rendezvous(int socket) {
  const char mine = 'k';
  char theirs = 0;
  return send_all(socket, &mine, 1) && receive_all(socket, &theirs, 1) && theirs == mine;
}

inline constexpr size_t kLargestPiece = 4 << 20;

// The sizes of a transfer's calls: `fixed` if nonzero, else random from
// 1 B to 4 MiB, log-uniform (so small ones are common); never past the end.
class PieceSizes {
 public:
  PieceSizes(size_t fixed, uint64_t seed) : fixed_(fixed), random_(seed) {}
  size_t next(uint64_t left) {
    size_t size = fixed_;
    if (size == 0) {
      std::uniform_real_distribution<double> exponent(
          0.0, std::log2(static_cast<double>(kLargestPiece)));
      size = std::max<size_t>(1, static_cast<size_t>(std::exp2(exponent(random_))));
    }
    return static_cast<size_t>(std::min<uint64_t>(size, left));
  }
  size_t largest() const { return std::max(kLargestPiece, fixed_); }

 private:
  size_t fixed_;
  std::mt19937_64 random_;
};

// Writes `total` bytes of pattern `seed`; the bytes accepted before an error.
inline uint64_t write_pattern(Stream& stream, uint64_t seed, uint64_t total, PieceSizes sizes) {
  std::vector<uint8_t> buffer(sizes.largest());
  uint64_t done = 0;
  while (done < total) {
    const size_t size = sizes.next(total - done);
    fill_pattern(seed, done, {buffer.data(), size});
    const ssize_t sent = send_bytes(stream, {buffer.data(), size});
    if (sent <= 0) break;
    done += static_cast<uint64_t>(sent);
    if (static_cast<size_t>(sent) != size) break;  // a broken stream's partial count
  }
  return done;
}

// Reads until `total` bytes of pattern `seed` came, or end of stream or an
// error; the good bytes before the first wrong one (or the end). Fixed
// sizes read with MSG_WAITALL.
inline uint64_t read_pattern(Stream& stream, uint64_t seed, uint64_t total, PieceSizes sizes,
                             int flags = 0) {
  std::vector<uint8_t> buffer(sizes.largest());
  uint64_t done = 0;
  while (done < total) {
    const ssize_t got = receive_bytes(stream, {buffer.data(), sizes.next(total - done)}, flags);
    if (got <= 0) return done;
    const int64_t wrong = first_mismatch(seed, done, {buffer.data(), static_cast<size_t>(got)});
    if (wrong >= 0) return done + static_cast<uint64_t>(wrong);
    done += static_cast<uint64_t>(got);
  }
  return done;
}

struct TransferPlan {
  uint64_t bytes;         // each way
  size_t write_size = 0;  // 0: random 1 B .. 4 MiB
  size_t read_size = 0;
};

// Writes our pattern and reads the peer's at the same time; true if every
// byte went out and every byte came in right.
inline bool transfer_both_ways(Stream& stream, uint64_t our_seed, uint64_t peer_seed,
                               const TransferPlan& plan) {
  uint64_t written = 0;
  std::thread writer([&] {
    written =
        write_pattern(stream, our_seed, plan.bytes, PieceSizes(plan.write_size, our_seed * 31 + 1));
  });
  const uint64_t read =
      read_pattern(stream, peer_seed, plan.bytes, PieceSizes(plan.read_size, our_seed * 17 + 5),
                   plan.read_size != 0 ? MSG_WAITALL : 0);
  writer.join();
  return written == plan.bytes && read == plan.bytes;
}

}  // namespace qpsock::stream::testing
