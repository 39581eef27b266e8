/* The JVM closes a socket another thread is blocked reading by dup2-ing a
 * placeholder (one end of a closed socketpair) over it and signalling the
 * thread. The reader must come back with EINTR, and later reads on the fd
 * must see the placeholder's EOF, with qpsock exactly as without. */
#include <pthread.h>
#include <signal.h>

#include "probe_common.h"

static int target_fd;
static volatile int reader_started;
static volatile ssize_t read_result = 1;
static volatile int read_errno;

static void on_signal(int signal_number) { (void)signal_number; }

static void* reader(void* unused) {
  (void)unused;
  char byte;
  reader_started = 1;
  read_result = read(target_fd, &byte, 1);
  read_errno = errno;
  return NULL;
}

int main(void) {
  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_handler = on_signal; /* no SA_RESTART, as the JDK */
  PROBE_CHECK(sigaction(SIGUSR1, &action, NULL) == 0);
  for (int round = 0; round < 20; ++round) {
    int client, server;
    probe_connect_pair(&client, &server);
    target_fd = client;
    reader_started = 0;
    read_result = 1;
    pthread_t thread;
    PROBE_CHECK(pthread_create(&thread, NULL, reader, NULL) == 0);
    while (!reader_started) usleep(100);
    usleep(2000);
    int placeholder[2];
    PROBE_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, placeholder) == 0);
    close(placeholder[1]);
    PROBE_CHECK(dup2(placeholder[0], client) == client);
    close(placeholder[0]);
    while (read_result == 1) {
      pthread_kill(thread, SIGUSR1);
      usleep(1000);
    }
    pthread_join(thread, NULL);
    PROBE_CHECK(read_result == -1 && read_errno == EINTR);
    char byte;
    PROBE_CHECK(read(client, &byte, 1) == 0); /* the placeholder's EOF */
    /* The peer sees nothing yet: the socket is still open in the kernel only
     * through... nothing: dup2 closed it, so the server reads EOF. */
    PROBE_CHECK(read(server, &byte, 1) == 0);
    close(client);
    close(server);
  }
  puts("close_idiom_probe: ok");
  return 0;
}
