/* bulk_exchange: both ends write and read at the same time, each direction
 * BYTES of a seeded pseudo-random stream, with random write and read sizes
 * from 1 B to 4 MiB (log-uniform, so small ones are common). Every received
 * byte is checked against the stream the peer generates; the exit status says
 * whether all of it arrived intact and in order.
 *
 *   bulk_exchange server PORT_FILE BYTES      (listens on 127.0.0.1, any port)
 *   bulk_exchange client PORT BYTES
 * The server writes stream 1 and expects stream 2; the client the reverse.
 *
 * Environment:
 *   BULK_EXCHANGE_ADDRESS=A  the server listens on IPv4 address A and the
 *                            client connects to it (default 127.0.0.1)
 *   BULK_EXCHANGE_SOURCE=S   the client binds IPv4 address S (any port) first
 *   BULK_EXCHANGE_START=FILE the writer waits (up to 60 s) for FILE to exist
 *                            before its first write (the reader starts at
 *                            once), so that a test can let an upgrade finish
 *                            before any data moves
 *   BULK_EXCHANGE_HOLD=FILE  once all is verified, print "holding" and wait
 *                            (up to 60 s) for FILE to exist before closing, so
 *                            that a test can look at the open connection
 *   BULK_EXCHANGE_IO_URING=1 set up an io_uring first (qpsock must then keep
 *                            the connection on TCP)
 *   BULK_EXCHANGE_SIGNALS=MICROSECONDS  while the data moves, SIGALRM every
 *                            MICROSECONDS (1 to 999999) to the process, with a
 *                            handler installed without SA_RESTART, as programs
 *                            that signal themselves have (PostgreSQL's latches,
 *                            timers); every call that returns EINTR is made
 *                            again, and the count taken is printed at the end
 *   BULK_EXCHANGE_CHILDREN=PROGRAM  once a quarter has arrived, while both
 *                            directions run, fork two children that inherit
 *                            the socket and never touch it: one execs PROGRAM,
 *                            the other calls exit(0). Both must end with
 *                            status 0, and the exchange must go on intact.
 *
 * A peer that dies shows up as a message naming the error or the end of
 * stream and exit status 1, never as a silent death: SIGPIPE is ignored (a
 * write gets EPIPE), and the direction that fails first shuts the socket down
 * so that the other one, perhaps blocked for good, wakes and the process ends
 * at once (tests/integration/peer_death.sh times it). */
#define _GNU_SOURCE
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define LARGEST_PIECE (4u << 20)

struct direction {
  int fd;
  uint64_t bytes;
  uint64_t seed;       /* the byte stream */
  uint64_t size_seed;  /* the piece sizes */
  uint64_t done;
  int failed;
};

/* 1 B .. 4 MiB, log-uniform. */
static size_t piece_size(uint64_t* state, uint64_t left) {
  uint64_t random = splitmix64(state);
  unsigned bits = (unsigned)(random % 23); /* 2^0 .. 2^22 */
  uint64_t size = 1 + ((random >> 8) & ((1ull << bits) - 1));
  if (size > LARGEST_PIECE) size = LARGEST_PIECE;
  return (size_t)(size < left ? size : left);
}

/* A direction failed: wake the other (which may wait on a peer that will
 * never read or write again) the way a real program stops its other thread. */
static void give_up(struct direction* self) {
  self->failed = 1;
  shutdown(self->fd, SHUT_RDWR);
}

/* Waits up to 60 s for the file named by environment variable NAME, if set. */
static void wait_for_file(const char* name) {
  const char* path = getenv(name);
  if (path == NULL) return;
  struct stat status;
  for (int waited = 0; waited < 6000 && stat(path, &status) != 0; waited++) usleep(10000);
}

static void* write_direction(void* argument) {
  struct direction* self = argument;
  wait_for_file("BULK_EXCHANGE_START");
  unsigned char* buffer = malloc(LARGEST_PIECE);
  struct byte_stream stream;
  byte_stream_init(&stream, self->seed);
  uint64_t sizes = self->size_seed;
  while (buffer != NULL && self->done < self->bytes) {
    size_t length = piece_size(&sizes, self->bytes - self->done);
    byte_stream_fill(&stream, buffer, length);
    if (write_all(self->fd, buffer, length) != 0) {
      fprintf(stderr, "bulk_exchange: write after %llu bytes: %s\n",
              (unsigned long long)self->done, strerror(errno));
      give_up(self);
      break;
    }
    self->done += length;
  }
  if (buffer == NULL) give_up(self);
  free(buffer);
  return NULL;
}

static void* read_direction(void* argument) {
  struct direction* self = argument;
  unsigned char* buffer = malloc(LARGEST_PIECE);
  unsigned char* expected = malloc(LARGEST_PIECE);
  struct byte_stream stream;
  byte_stream_init(&stream, self->seed);
  uint64_t sizes = self->size_seed;
  while (buffer != NULL && expected != NULL && self->done < self->bytes) {
    size_t wanted = piece_size(&sizes, self->bytes - self->done);
    ssize_t got = read(self->fd, buffer, wanted);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      fprintf(stderr, "bulk_exchange: read after %llu of %llu bytes: %s\n",
              (unsigned long long)self->done, (unsigned long long)self->bytes,
              got == 0 ? "end of stream" : strerror(errno));
      give_up(self);
      break;
    }
    byte_stream_fill(&stream, expected, (size_t)got);
    if (memcmp(buffer, expected, (size_t)got) != 0) {
      size_t at = 0;
      while (buffer[at] == expected[at]) at++;
      fprintf(stderr, "bulk_exchange: wrong byte at offset %llu\n",
              (unsigned long long)(self->done + at));
      give_up(self);
      break;
    }
    self->done += (uint64_t)got;
  }
  if (buffer == NULL || expected == NULL) give_up(self);
  free(buffer);
  free(expected);
  return NULL;
}

/* An io_uring with its submission ring mapped, as liburing sets one up; kept
 * for the life of the process. */
static int set_up_io_uring(void) {
  struct io_uring_params parameters;
  memset(&parameters, 0, sizeof(parameters));
  long ring = syscall(SYS_io_uring_setup, 8, &parameters);
  if (ring < 0) {
    perror("bulk_exchange: io_uring_setup");
    return -1;
  }
  size_t size = parameters.sq_off.array + parameters.sq_entries * sizeof(unsigned);
  if (mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, (int)ring,
           IORING_OFF_SQ_RING) == MAP_FAILED) {
    perror("bulk_exchange: mmap of the io_uring");
    return -1;
  }
  return 0;
}

static void hold_until_released(void) {
  const char* release = getenv("BULK_EXCHANGE_HOLD");
  if (release == NULL) return;
  fprintf(stderr, "bulk_exchange: holding\n");
  wait_for_file("BULK_EXCHANGE_HOLD");
}

static int child_exit_status(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* BULK_EXCHANGE_CHILDREN: 0 if both children ended with status 0. */
static int fork_children_mid_stream(const char* program, const struct direction* in) {
  while (__atomic_load_n(&in->done, __ATOMIC_RELAXED) < in->bytes / 4 &&
         !__atomic_load_n(&in->failed, __ATOMIC_RELAXED))
    usleep(1000);
  pid_t exec_child = fork();
  if (exec_child == 0) {
    execl(program, program, (char*)NULL);
    _exit(126);
  }
  pid_t exit_child = fork();
  if (exit_child == 0) exit(0);
  if (exec_child < 0 || exit_child < 0) die("fork:");
  int exec_status = child_exit_status(exec_child), exit_status = child_exit_status(exit_child);
  fprintf(stderr, "bulk_exchange: children with the socket inherited ended: %s %d, exit(0) %d\n",
          program, exec_status, exit_status);
  return exec_status == 0 && exit_status == 0 ? 0 : 1;
}

static volatile sig_atomic_t signals_taken = 0;

static void count_signal(int number) {
  (void)number;
  signals_taken = signals_taken + 1;
}

/* BULK_EXCHANGE_SIGNALS: starts the interval timer; 1 if asked for, else 0. */
static int start_signal_storm(void) {
  const char* text = getenv("BULK_EXCHANGE_SIGNALS");
  if (text == NULL || *text == '\0') return 0;
  long interval = parse_number(text, "BULK_EXCHANGE_SIGNALS");
  if (interval < 1 || interval > 999999) die("BULK_EXCHANGE_SIGNALS: 1 to 999999 microseconds");
  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_handler = count_signal; /* no SA_RESTART */
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGALRM, &action, NULL) != 0) die("sigaction:");
  struct itimerval every = {{0, interval}, {0, interval}};
  if (setitimer(ITIMER_REAL, &every, NULL) != 0) die("setitimer:");
  return 1;
}

static void stop_signal_storm(void) {
  struct itimerval never = {{0, 0}, {0, 0}};
  if (setitimer(ITIMER_REAL, &never, NULL) != 0) die("setitimer:");
}

static int exchange(int fd, uint64_t bytes, uint64_t send_seed, uint64_t receive_seed) {
  struct direction out = {fd, bytes, send_seed, send_seed * 7 + 1, 0, 0};
  struct direction in = {fd, bytes, receive_seed, receive_seed * 13 + 5, 0, 0};
  pthread_t writer, reader;
  const int storm = start_signal_storm();
  if (pthread_create(&writer, NULL, write_direction, &out) != 0 ||
      pthread_create(&reader, NULL, read_direction, &in) != 0) {
    fprintf(stderr, "bulk_exchange: pthread_create failed\n");
    return 1;
  }
  const char* children = getenv("BULK_EXCHANGE_CHILDREN");
  const int children_failed = children != NULL && fork_children_mid_stream(children, &in) != 0;
  pthread_join(writer, NULL);
  pthread_join(reader, NULL);
  if (storm) {
    stop_signal_storm();
    fprintf(stderr, "bulk_exchange: %ld signals taken while the data moved\n", (long)signals_taken);
  }
  if (!out.failed && !in.failed) hold_until_released();
  /* Both directions are complete: an orderly end, as a real program's. */
  close(fd);
  fprintf(stderr, "bulk_exchange: sent %llu, received and verified %llu bytes\n",
          (unsigned long long)out.done, (unsigned long long)in.done);
  return out.failed || in.failed || in.done != bytes || children_failed;
}

/* The IPv4 address in environment variable NAME (with PORT), or loopback. */
static socklen_t address_from_environment(const char* name, struct sockaddr_storage* storage,
                                          int port) {
  socklen_t length = loopback_address(storage, 0, port);
  const char* text = getenv(name);
  if (text != NULL && *text != '\0' &&
      inet_pton(AF_INET, text, &((struct sockaddr_in*)storage)->sin_addr) != 1)
    die("bad %s '%s'", name, text);
  return length;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: bulk_exchange server PORT_FILE BYTES | client PORT BYTES\n");
    return 2;
  }
  uint64_t bytes = (uint64_t)parse_number(argv[3], "BYTES");
  signal(SIGPIPE, SIG_IGN);
  const char* io_uring = getenv("BULK_EXCHANGE_IO_URING");
  if (io_uring != NULL && strcmp(io_uring, "1") == 0 && set_up_io_uring() != 0) return 1;
  if (strcmp(argv[1], "server") == 0) {
    struct sockaddr_storage here;
    socklen_t here_length = address_from_environment("BULK_EXCHANGE_ADDRESS", &here, 0);
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0 || bind(listener, (struct sockaddr*)&here, here_length) != 0 ||
        listen(listener, 16) != 0)
      die("listen:");
    struct sockaddr_in bound;
    socklen_t length = sizeof(bound);
    if (listener < 0 || getsockname(listener, (struct sockaddr*)&bound, &length) != 0) return 1;
    FILE* port_file = fopen(argv[2], "w");
    if (port_file == NULL) return 1;
    fprintf(port_file, "%d\n", ntohs(bound.sin_port));
    fclose(port_file);
    int fd = accept(listener, NULL, NULL);
    if (fd < 0) return 1;
    close(listener);
    return exchange(fd, bytes, 1, 2);
  }
  struct sockaddr_storage address;
  socklen_t length = address_from_environment("BULK_EXCHANGE_ADDRESS", &address,
                                              (int)parse_number(argv[2], "PORT"));
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd >= 0 && getenv("BULK_EXCHANGE_SOURCE") != NULL) {
    struct sockaddr_storage source;
    socklen_t source_length = address_from_environment("BULK_EXCHANGE_SOURCE", &source, 0);
    if (bind(fd, (struct sockaddr*)&source, source_length) != 0) die("bind source:");
  }
  if (fd < 0 || connect(fd, (struct sockaddr*)&address, length) != 0) {
    perror("bulk_exchange: connect");
    return 1;
  }
  return exchange(fd, bytes, 2, 1);
}
