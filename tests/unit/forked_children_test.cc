// The children a process forked while it had connections: a client's upgrade
// is declined while one of them keeps the socket (upgrade/forked_children.h).
#include "upgrade/forked_children.h"

#include <gtest/gtest.h>

#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "process/process_calls.h"
#include "upgrade/connection_registry.h"

namespace qpsock::upgrade {
namespace {

constexpr int kConnectionFd = 760;  // a registry slot no other test uses

uint64_t inode_of(int fd) {
  struct stat status{};
  return fstat(fd, &status) == 0 ? status.st_ino : 0;
}

// Forks as the fork wrapper does; the child runs `in_child` and exits with its result.
template <typename InChild>
pid_t fork_as_the_wrapper_does(InChild in_child) {
  fork_starting();
  const pid_t child = fork();
  fork_finished(child);
  if (child == 0) _exit(in_child());
  return child;
}

int exit_status(pid_t child) {
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(ForkedChildren, AChildThatKeepsTheSocketIsFoundAndOneThatLetItGoIsNot) {
  int sockets[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sockets), 0);
  attach_connection(kConnectionFd, std::make_shared<Connection>(config::Role::client));
  const uint64_t inode = inode_of(sockets[0]);

  // A child that keeps the socket until the parent closes the other end.
  const pid_t keeper = fork_as_the_wrapper_does([&] {
    close(sockets[1]);
    char byte;
    return static_cast<int>(read(sockets[0], &byte, 1));
  });
  // A child that lets it go at once, as a shell's command substitution does.
  const pid_t quick = fork_as_the_wrapper_does([&] { return 0; });
  ASSERT_EQ(exit_status(quick), 0);

  EXPECT_TRUE(forked_child_keeps_socket(inode));

  // In a child, its parent's fork is over and its parent's children (the
  // keeper, alive) are not its own.
  const pid_t child = fork_as_the_wrapper_does([&] {
    const auto begun = std::chrono::steady_clock::now();
    const bool kept = forked_child_keeps_socket(inode);
    return kept || std::chrono::steady_clock::now() - begun > std::chrono::milliseconds(100) ? 1 : 0;
  });
  EXPECT_EQ(exit_status(child), 0) << "the child waited for its parent's fork, or counted its siblings";

  close(sockets[1]);
  EXPECT_EQ(exit_status(keeper), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(forked_child_keeps_socket(inode));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  detach_connection(kConnectionFd);
  close(sockets[0]);
}

// A shell forks a child for every command substitution: some child or other
// may hold the socket at every moment, each for milliseconds. None of them
// keeps it (a busy bash script over /dev/tcp stayed on TCP under load when
// any holder at all was waited for).
TEST(ForkedChildren, AStreamOfShortLivedChildrenDoesNotKeepTheSocket) {
  int sockets[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sockets), 0);
  attach_connection(kConnectionFd, std::make_shared<Connection>(config::Role::client));
  const uint64_t inode = inode_of(sockets[0]);

  std::atomic<bool> stop{false};
  std::thread shell([&] {
    std::vector<pid_t> running;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (!stop.load() && std::chrono::steady_clock::now() < end) {
      // Each child lives 20 ms and the next comes 5 ms later: they overlap.
      running.push_back(fork_as_the_wrapper_does([] { usleep(20000); return 0; }));
      usleep(5000);
      if (running.size() > 8) {
        waitpid(running.front(), nullptr, 0);
        running.erase(running.begin());
      }
    }
    for (pid_t child : running) waitpid(child, nullptr, 0);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(forked_child_keeps_socket(inode));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
  stop = true;
  shell.join();
  detach_connection(kConnectionFd);
  close(sockets[0]);
  close(sockets[1]);
}

// posix_spawn starts a program with the process's descriptors and no fork
// qpsock sees: a server's handler whose stdin is the socket, started before
// the client's upgrade is answered, reads it over TCP. Before, the spawned
// program was not looked at and the upgrade took the bytes it was reading.
TEST(ForkedChildren, ASpawnedProgramThatKeepsTheSocketIsFound) {
  int sockets[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sockets), 0);
  attach_connection(kConnectionFd, std::make_shared<Connection>(config::Role::client));
  const uint64_t inode = inode_of(sockets[0]);

  posix_spawn_file_actions_t actions;
  ASSERT_EQ(posix_spawn_file_actions_init(&actions), 0);
  ASSERT_EQ(posix_spawn_file_actions_adddup2(&actions, sockets[0], 0), 0);
  ASSERT_EQ(posix_spawn_file_actions_addclose(&actions, sockets[1]), 0);
  char shell[] = "/bin/sh", dash_c[] = "-c", script[] = "read line";
  char* argv[] = {shell, dash_c, script, nullptr};
  char* envp[] = {nullptr};
  // As a caller that does not want the pid: the child is remembered anyway.
  ASSERT_EQ(process::posix_spawn(nullptr, "/bin/sh", &actions, nullptr, argv, envp), 0);
  posix_spawn_file_actions_destroy(&actions);

  EXPECT_TRUE(forked_child_keeps_socket(inode));

  // The program reads its line, exits, and lets the socket go.
  ASSERT_EQ(write(sockets[1], "bye\n", 4), 4);
  int status = 0;
  ASSERT_GT(wait(&status), 0);
  EXPECT_FALSE(forked_child_keeps_socket(inode));
  detach_connection(kConnectionFd);
  close(sockets[0]);
  close(sockets[1]);
}

}  // namespace
}  // namespace qpsock::upgrade
