/* fork_echo_server: accepts TCP connections on loopback and forks a child per
 * connection; the child echoes every byte until EOF, then half-closes and
 * exits, the parent closes its copy of the socket and reaps children.
 * With -p, a prefork server instead: WORKERS children forked up front all
 * accept from the one listener and echo each connection they take, as
 * Apache's prefork and many Python servers do; the parent only counts.
 *
 * usage: fork_echo_server [-6] [-w] [-n CONNECTIONS] [-p WORKERS] PORT
 *   -6  listen on ::1 instead of 127.0.0.1
 *   -w  wait with poll(2) until the first bytes have come before the first
 *       read, as an event loop does (qpsock's upgrade then starts once the
 *       client has written, not as soon as the connection is accepted)
 *   -n  exit after CONNECTIONS connections have been served; the exit status
 *       is 0 only if every child succeeded. Without -n it serves until killed.
 *   -p  prefork WORKERS accepting children
 */
#define _GNU_SOURCE
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include "common.h"

static int child_failures = 0;
static long children_running = 0;
static int wait_before_reading = 0;

static int echo(int fd) {
  static unsigned char buffer[1 << 16];
  unsigned long long total = 0;
  if (wait_before_reading) {
    struct pollfd entry = {fd, POLLIN, 0};
    while (poll(&entry, 1, -1) < 0 && errno == EINTR) {
    }
  }
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

/* A prefork worker: takes connections from the shared listener until killed,
 * and tells the parent the result of each on `results` (one byte: 0 ok). */
static void prefork_worker(int listener, int results) {
  fprintf(stderr, "fork_echo_server[%d]: prefork worker ready\n", (int)getpid());
  for (;;) {
    int connection = accept(listener, NULL, NULL);
    if (connection < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      fprintf(stderr, "fork_echo_server[%d]: accept: %s\n", (int)getpid(), strerror(errno));
      _exit(1);
    }
    fprintf(stderr, "fork_echo_server[%d]: worker took a connection\n", (int)getpid());
    unsigned char result = (unsigned char)echo(connection);
    if (write_all(results, &result, 1) != 0) _exit(1);
  }
}

static int prefork_serve(int listener, long workers, long limit) {
  int results[2];
  if (pipe(results) != 0) die("pipe:");
  pid_t* worker_pids = calloc((size_t)workers, sizeof(pid_t));
  if (worker_pids == NULL) die("calloc:");
  for (long i = 0; i < workers; i++) {
    pid_t child = fork();
    if (child < 0) die("fork:");
    if (child == 0) {
      close(results[0]);
      prefork_worker(listener, results[1]);
    }
    worker_pids[i] = child;
  }
  close(results[1]);
  close(listener);
  long served = 0, failed = 0;
  while (limit < 0 || served < limit) {
    unsigned char result;
    ssize_t got = read(results[0], &result, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break; /* every worker died */
    served++;
    if (result != 0) failed++;
  }
  for (long i = 0; i < workers; i++) kill(worker_pids[i], SIGTERM);
  for (long i = 0; i < workers; i++) waitpid(worker_pids[i], NULL, 0);
  free(worker_pids);
  if (limit >= 0 && served < limit) {
    fprintf(stderr, "fork_echo_server: the workers died after %ld of %ld connections\n", served, limit);
    return 1;
  }
  if (failed > 0) {
    fprintf(stderr, "fork_echo_server: %ld of %ld connections failed\n", failed, served);
    return 1;
  }
  fprintf(stderr, "fork_echo_server: %ld workers served %ld connections\n", workers, served);
  return 0;
}

int main(int argc, char** argv) {
  program_name = "fork_echo_server";
  int ipv6 = 0;
  long limit = -1, workers = 0;
  int option;
  while ((option = getopt(argc, argv, "6wn:p:")) != -1) {
    switch (option) {
      case '6': ipv6 = 1; break;
      case 'w': wait_before_reading = 1; break;
      case 'n': limit = parse_number(optarg, "connection count"); break;
      case 'p': workers = parse_number(optarg, "worker count"); break;
      default: die("usage: fork_echo_server [-6] [-w] [-n CONNECTIONS] [-p WORKERS] PORT");
    }
  }
  if (optind + 1 != argc) die("usage: fork_echo_server [-6] [-w] [-n CONNECTIONS] [-p WORKERS] PORT");
  int port = (int)parse_number(argv[optind], "port");
  signal(SIGPIPE, SIG_IGN);
  report_qpsock_state(program_name);

  int listener = listen_loopback(ipv6, port);
  if (workers > 0) return prefork_serve(listener, workers, limit);
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
