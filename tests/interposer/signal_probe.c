/* Socket calls from a signal handler, thousands of times, while the main
 * thread streams data over TCP: nothing may deadlock, lose or corrupt bytes. */
#include <signal.h>
#include <poll.h>
#include <sys/time.h>
#include <sys/wait.h>

#include "probe_common.h"

static int handler_client = -1, handler_server = -1;
static volatile sig_atomic_t handler_runs, handler_failures;

static void on_alarm(int signal_number) {
  (void)signal_number;
  int saved = errno;
  char byte = 'x', echo;
  /* The handler's own socket pair: a byte out and back, all through qpsock. */
  if (send(handler_client, &byte, 1, MSG_DONTWAIT) != 1) ++handler_failures;
  if (recv(handler_server, &echo, 1, 0) != 1 || echo != 'x') ++handler_failures;
  struct pollfd entry = {handler_client, POLLOUT, 0};
  if (poll(&entry, 1, 0) != 1) ++handler_failures;
  ++handler_runs;
  errno = saved;
}

int main(void) {
  probe_connect_pair(&handler_client, &handler_server);
  int client, server;
  probe_connect_pair(&client, &server);

  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_handler = on_alarm;
  action.sa_flags = SA_RESTART;
  PROBE_CHECK(sigaction(SIGALRM, &action, NULL) == 0);
  struct itimerval timer = {{0, 200}, {0, 200}};
  PROBE_CHECK(setitimer(ITIMER_REAL, &timer, NULL) == 0);

  enum { kChunk = 4096, kChunks = 5000 };
  pid_t writer = fork();
  PROBE_CHECK(writer >= 0);
  if (writer == 0) {
    char chunk[kChunk];
    for (int index = 0; index < kChunks; ++index) {
      memset(chunk, (char)index, sizeof(chunk));
      probe_write_all(client, chunk, sizeof(chunk));
    }
    _exit(0);
  }
  close(client);
  char chunk[kChunk], expected[kChunk];
  for (int index = 0; index < kChunks; ++index) {
    probe_read_all(server, chunk, sizeof(chunk));
    memset(expected, (char)index, sizeof(expected));
    PROBE_CHECK(memcmp(chunk, expected, sizeof(chunk)) == 0);
  }
  struct itimerval stop = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &stop, NULL);
  int status = 0;
  while (waitpid(writer, &status, 0) < 0 && errno == EINTR) {
  }
  PROBE_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  PROBE_CHECK(handler_failures == 0);
  printf("signal_probe: ok (%d handler runs)\n", (int)handler_runs);
  return handler_runs > 0 ? 0 : 1;
}
