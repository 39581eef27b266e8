// A signal that interrupts the look at the peer's pidfd is not the peer's
// death. (PeerProcess::exited() took poll's EINTR for an exit: PostgreSQL's
// backends, which signal themselves for every latch, lost connections
// mid-query, both ends seeing ECONNRESET.)
#include <gtest/gtest.h>

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "transport/shm/peer_process.h"

namespace qpsock::transport::shm {
namespace {

void ignore_signal(int) {}

TEST(ShmPeerProcess, ASignalDuringTheLookIsNotThePeersExit) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  PeerProcess peer;
  ASSERT_EQ(peer.open(child), 0);

  struct sigaction action {};
  struct sigaction previous {};
  action.sa_handler = ignore_signal;  // no SA_RESTART: poll returns EINTR
  sigemptyset(&action.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &action, &previous), 0);

  const pthread_t looker = pthread_self();
  std::atomic<bool> done{false};
  std::thread signaller([&] {
    while (!done.load(std::memory_order_relaxed)) pthread_kill(looker, SIGUSR1);
  });
  int exits_seen = 0;
  for (int look = 0; look < 20000; ++look) exits_seen += peer.exited() ? 1 : 0;
  done.store(true, std::memory_order_relaxed);
  signaller.join();
  sigaction(SIGUSR1, &previous, nullptr);

  EXPECT_EQ(exits_seen, 0) << "a live peer was taken for dead";
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(peer.exited());
}

}  // namespace
}  // namespace qpsock::transport::shm
