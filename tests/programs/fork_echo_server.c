/* fork_echo_server: accepts TCP connections on loopback and forks a child per
 * connection; the child echoes every byte until EOF, then half-closes and
 * exits, the parent closes its copy of the socket and reaps children.
 *
 * usage: fork_echo_server [-6] [-n CONNECTIONS] PORT
 *   -6  listen on ::1 instead of 127.0.0.1
 *   -n  exit after CONNECTIONS connections have been served; the exit status
 *       is 0 only if every child succeeded. Without -n it serves until killed.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/wait.h>

#include "common.h"

static int child_failures = 0;
static long children_running = 0;

static int echo(int fd) {
  static unsigned char buffer[1 << 16];
  unsigned long long total = 0;
  for (;;) {
    ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, "fork_echo_server[%d]: read: %s\n", (int)getpid(), strerror(errno));
      return 1;
    }
    if (got == 0) break;
    if (write_all(fd, buffer, (size_t)got) != 0) {
      fprintf(stderr, "fork_echo_server[%d]: write: %s\n", (int)getpid(), strerror(errno));
      return 1;
    }
    total += (unsigned long long)got;
  }
  if (shutdown(fd, SHUT_WR) != 0) {
    fprintf(stderr, "fork_echo_server[%d]: shutdown: %s\n", (int)getpid(), strerror(errno));
    return 1;
  }
  /* Wait for the peer's close so our FIN is never followed by an RST. */
  while (read(fd, buffer, sizeof(buffer)) > 0) {
  }
  close(fd);
  fprintf(stderr, "fork_echo_server[%d]: echoed %llu bytes\n", (int)getpid(), total);
  return 0;
}

static void reap(int options) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, options)) > 0) {
    children_running--;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "fork_echo_server: child %d failed (status 0x%x)\n", (int)pid, status);
      child_failures++;
    }
  }
}

int main(int argc, char** argv) {
  program_name = "fork_echo_server";
  int ipv6 = 0;
  long limit = -1;
  int option;
  while ((option = getopt(argc, argv, "6n:")) != -1) {
    switch (option) {
      case '6': ipv6 = 1; break;
      case 'n': limit = parse_number(optarg, "connection count"); break;
      default: die("usage: fork_echo_server [-6] [-n CONNECTIONS] PORT");
    }
  }
  if (optind + 1 != argc) die("usage: fork_echo_server [-6] [-n CONNECTIONS] PORT");
  int port = (int)parse_number(argv[optind], "port");
  signal(SIGPIPE, SIG_IGN);
  report_qpsock_state(program_name);

  int listener = listen_loopback(ipv6, port);
  long served = 0;
  while (limit < 0 || served < limit) {
    int connection = accept(listener, NULL, NULL);
    if (connection < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      die("accept:");
    }
    pid_t child = fork();
    if (child < 0) die("fork:");
    if (child == 0) {
      close(listener);
      _exit(echo(connection));
    }
    /* Which process serves which connection: a test checks that the upgrade
     * happens in the child (its pid in qpsock's log line), not here. */
    fprintf(stderr, "fork_echo_server[%d]: connection %ld served by child %d\n", (int)getpid(), served + 1,
            (int)child);
    children_running++;
    close(connection);
    served++;
    reap(WNOHANG);
  }
  close(listener);
  reap(0);
  if (child_failures > 0) {
    fprintf(stderr, "fork_echo_server: %d of %ld children failed\n", child_failures, served);
    return 1;
  }
  fprintf(stderr, "fork_echo_server: served %ld connections\n", served);
  return 0;
}
