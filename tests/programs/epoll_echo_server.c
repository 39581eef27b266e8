/* epoll_echo_server: an event-driven echo server on loopback, one epoll set
 * holding the listener and every connection (non-blocking). Each connection's
 * bytes are echoed back; at its EOF the echo is flushed, the write side shut
 * down, and the socket closed.
 *
 * usage: epoll_echo_server [-6] [-m level|edge|oneshot] [-t THREADS]
 *                          [-w poll|epoll] [-n CONNECTIONS] PORT
 *   -m  how connections are registered:
 *       level    EPOLLIN, plus EPOLLOUT while an echo waits for room;
 *       edge     EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET once; each event reads
 *                and writes until EAGAIN;
 *       oneshot  EPOLLIN|EPOLLONESHOT (and EPOLLOUT while an echo waits),
 *                re-armed with EPOLL_CTL_MOD after each event.
 *   -t  THREADS threads wait on the one epoll set (oneshot only: it is what
 *       makes one connection's events go to one thread at a time).
 *   -w  nest the set: the threads wait on an outer epoll set holding it
 *       (epoll) or poll its fd (poll), then take its events without waiting.
 *   -n  exit after CONNECTIONS connections have ended: status 0 only if each
 *       echoed every byte it read.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>

#include "common.h"

enum mode { LEVEL, EDGE, ONESHOT };

struct connection {
  int fd;
  pthread_mutex_t lock;
  unsigned char* pending; /* read, not yet echoed */
  size_t pending_offset, pending_length;
  int read_closed;
  int ended;
  unsigned long long echoed;
};

static enum mode mode = LEVEL;
static const char* nesting = NULL;
static int epoll_fd, outer_fd = -1, listener;
static long connections_limit = -1;
static long connections_ended = 0;
static int failures = 0;
static pthread_mutex_t counts_lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t connection_events(const struct connection* connection) {
  switch (mode) {
    case EDGE: return EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    case ONESHOT: return EPOLLIN | EPOLLONESHOT | (connection->pending_length ? EPOLLOUT : 0);
    default: return EPOLLIN | (connection->pending_length ? EPOLLOUT : 0);
  }
}

static void control(int operation, struct connection* connection) {
  struct epoll_event event = {.events = connection_events(connection), .data.ptr = connection};
  if (epoll_ctl(epoll_fd, operation, connection->fd, &event) != 0) die("epoll_ctl:");
}

static void accept_all(void) {
  for (;;) {
    int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) return;
      die("accept4:");
    }
    struct connection* connection = calloc(1, sizeof(*connection));
    if (connection == NULL) die("calloc:");
    connection->fd = fd;
    pthread_mutex_init(&connection->lock, NULL);
    control(EPOLL_CTL_ADD, connection);
  }
}

static void end_connection(struct connection* connection, int failed) {
  connection->ended = 1;
  if (epoll_ctl(epoll_fd, EPOLL_CTL_DEL, connection->fd, NULL) != 0) die("epoll_ctl DEL:");
  close(connection->fd);
  free(connection->pending);
  pthread_mutex_lock(&counts_lock);
  ++connections_ended;
  if (failed) ++failures;
  pthread_mutex_unlock(&counts_lock);
  /* Freed only when the server exits: another thread's event may still name it. */
}

/* Writes what is pending: 1 all written, 0 would block, -1 failed. */
static int flush_pending(struct connection* connection) {
  while (connection->pending_offset < connection->pending_length) {
    ssize_t put = write(connection->fd, connection->pending + connection->pending_offset,
                        connection->pending_length - connection->pending_offset);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0 && errno == EAGAIN) return 0;
    if (put < 0) return -1;
    connection->pending_offset += (size_t)put;
    connection->echoed += (unsigned long long)put;
  }
  connection->pending_offset = connection->pending_length = 0;
  return 1;
}

/* Serves one event; returns 1 when the connection has ended. */
static int serve(struct connection* connection) {
  static __thread unsigned char buffer[1 << 16];
  int reads = 0;
  for (;;) {
    int flushed = flush_pending(connection);
    if (flushed < 0) {
      end_connection(connection, 1);
      return 1;
    }
    if (flushed == 0) break; /* wait for room before reading more */
    /* Level-triggered modes take one read per event: the set says again. */
    if (mode != EDGE && reads > 0 && !connection->read_closed) break;
    if (connection->read_closed) {
      if (shutdown(connection->fd, SHUT_WR) != 0) die("shutdown:");
      end_connection(connection, 0);
      return 1;
    }
    ssize_t got = read(connection->fd, buffer, sizeof(buffer));
    ++reads;
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == EAGAIN) break;
    if (got < 0) {
      end_connection(connection, 1);
      return 1;
    }
    if (got == 0) {
      connection->read_closed = 1;
      continue;
    }
    connection->pending = realloc(connection->pending, (size_t)got);
    if (connection->pending == NULL) die("realloc:");
    memcpy(connection->pending, buffer, (size_t)got);
    connection->pending_offset = 0;
    connection->pending_length = (size_t)got;
  }
  if (mode != EDGE) control(EPOLL_CTL_MOD, connection);
  return 0;
}

static int finished(void) {
  pthread_mutex_lock(&counts_lock);
  int done = connections_limit >= 0 && connections_ended >= connections_limit;
  pthread_mutex_unlock(&counts_lock);
  return done;
}

/* Waits for the set's events: directly, or through the outer set or poll. */
static int wait_events(struct epoll_event* events, int capacity) {
  if (nesting == NULL) return epoll_wait(epoll_fd, events, capacity, 200);
  if (strcmp(nesting, "poll") == 0) {
    struct pollfd set = {.fd = epoll_fd, .events = POLLIN};
    int ready = poll(&set, 1, 200);
    if (ready <= 0) return ready;
  } else {
    struct epoll_event outer;
    int ready = epoll_wait(outer_fd, &outer, 1, 200);
    if (ready <= 0) return ready;
    if (outer.data.fd != epoll_fd) die("outer set reported fd %d", outer.data.fd);
  }
  return epoll_wait(epoll_fd, events, capacity, 0);
}

static void* event_loop(void* unused) {
  (void)unused;
  struct epoll_event events[64];
  while (!finished()) {
    int ready = wait_events(events, 64);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) die("epoll_wait:");
    for (int index = 0; index < ready; ++index) {
      if (events[index].data.ptr == NULL) {
        accept_all();
        continue;
      }
      struct connection* connection = events[index].data.ptr;
      pthread_mutex_lock(&connection->lock);
      /* An event another thread's batch held for a connection since ended. */
      if (!connection->ended) serve(connection);
      pthread_mutex_unlock(&connection->lock);
    }
  }
  return NULL;
}

int main(int argc, char** argv) {
  program_name = "epoll_echo_server";
  int ipv6 = 0, option;
  long threads = 1;
  while ((option = getopt(argc, argv, "6m:t:w:n:")) != -1) {
    switch (option) {
      case '6': ipv6 = 1; break;
      case 'm':
        if (strcmp(optarg, "level") == 0) mode = LEVEL;
        else if (strcmp(optarg, "edge") == 0) mode = EDGE;
        else if (strcmp(optarg, "oneshot") == 0) mode = ONESHOT;
        else die("unknown mode %s", optarg);
        break;
      case 't': threads = parse_number(optarg, "threads"); break;
      case 'w': nesting = optarg; break;
      case 'n': connections_limit = parse_number(optarg, "connections"); break;
      default: die("usage: epoll_echo_server [-6] [-m level|edge|oneshot] [-t THREADS] [-w poll|epoll] [-n CONNECTIONS] PORT");
    }
  }
  if (optind + 1 != argc) die("usage: epoll_echo_server [options] PORT");
  if (threads < 1 || threads > 64 || (threads > 1 && mode != ONESHOT))
    die("-t above 1 needs -m oneshot");
  if (nesting != NULL && strcmp(nesting, "poll") != 0 && strcmp(nesting, "epoll") != 0)
    die("-w takes poll or epoll");
  report_qpsock_state(program_name);
  listener = listen_loopback(ipv6, (int)parse_number(argv[optind], "port"));
  if (fcntl(listener, F_SETFL, O_NONBLOCK) != 0) die("fcntl:");
  epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) die("epoll_create1:");
  struct epoll_event listen_event = {.events = EPOLLIN, .data.ptr = NULL};
  if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listener, &listen_event) != 0) die("epoll_ctl:");
  if (nesting != NULL && strcmp(nesting, "epoll") == 0) {
    outer_fd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event nested = {.events = EPOLLIN, .data.fd = epoll_fd};
    if (outer_fd < 0 || epoll_ctl(outer_fd, EPOLL_CTL_ADD, epoll_fd, &nested) != 0)
      die("outer epoll set:");
  }
  pthread_t workers[64];
  for (long index = 1; index < threads; ++index)
    if (pthread_create(&workers[index], NULL, event_loop, NULL) != 0) die("pthread_create");
  event_loop(NULL);
  for (long index = 1; index < threads; ++index) pthread_join(workers[index], NULL);
  printf("%ld connections, %d failed\n", connections_ended, failures);
  return failures == 0 ? 0 : 1;
}
