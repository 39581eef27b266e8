/* Connections closed and opened as fast as the server can: each number is
 * reused at once, while qpsock's upgrades, doorbells and FINs for the
 * connection that had it may still be under way. Nothing may reach another
 * connection: every answer is checked by CRC-32.
 *
 *   reuse_storm server PORT COUNT
 *     accepts COUNT connections, each served by a thread of its own. A
 *     connection whose first byte is 'C' is closed at once (its upgrade
 *     under way); one whose first byte is 'D' then sends 4 bytes of length
 *     and that many bytes, and is answered with their CRC-32 and closed.
 *     A connection that ends before its first byte was closed at once by
 *     the client (its side of the upgrade under way). A 'D' connection is
 *     closed by the client first, once it has its answer; the server closes
 *     on that EOF, as a request-reply server does. Prints "served COUNT:
 *     CLOSED closed at once, CHECKED checked, FAILED failed".
 *   reuse_storm client PORT COUNT THREADS SEED
 *     THREADS threads make COUNT connections between them: a quarter closed
 *     at once, a quarter 'C' (read to their EOF), the rest 'D' with 1 B to
 *     256 KiB. Exits 1 if any answer is wrong, an error or an EOF comes
 *     early, or a 'C' connection reads anything but its EOF. */
#define _GNU_SOURCE
#include <pthread.h>

#include "common.h"

static int read_all(int fd, void* buffer, size_t length) {
  unsigned char* cursor = buffer;
  while (length > 0) {
    ssize_t got = read(fd, cursor, length);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return got == 0 ? -2 : -1;
    cursor += got;
    length -= (size_t)got;
  }
  return 0;
}

static pthread_mutex_t counts_lock = PTHREAD_MUTEX_INITIALIZER;
static long closed_at_once, checked, failures;

static void* serve_one(void* argument) {
  int fd = (int)(intptr_t)argument;
  unsigned char kind = 0;
  const int first = read_all(fd, &kind, 1);
  if (first == -2 || (first == 0 && kind == 'C')) {
    close(fd);
    pthread_mutex_lock(&counts_lock);
    closed_at_once++;
    pthread_mutex_unlock(&counts_lock);
    return NULL;
  }
  if (first != 0) {
    fprintf(stderr, "reuse_storm: server: no first byte: %s\n", strerror(errno));
    pthread_mutex_lock(&counts_lock);
    failures++;
    pthread_mutex_unlock(&counts_lock);
    close(fd);
    return NULL;
  }
  uint32_t length = 0;
  int ok = kind == 'D' && read_all(fd, &length, sizeof(length)) == 0 && length <= (1u << 20);
  unsigned char* data = ok ? malloc(length + 1) : NULL;
  ok = ok && data != NULL && read_all(fd, data, length) == 0;
  if (ok) {
    uint32_t crc = crc32_update(0, data, length);
    unsigned char after = 0;
    ok = write_all(fd, &crc, sizeof(crc)) == 0 && read(fd, &after, 1) == 0;
  }
  free(data);
  close(fd);
  pthread_mutex_lock(&counts_lock);
  if (ok) checked++;
  else failures++;
  pthread_mutex_unlock(&counts_lock);
  if (!ok) fprintf(stderr, "reuse_storm: server: a 'D' connection failed\n");
  return NULL;
}

static int serve(int port, long count) {
  int listener = listen_loopback(0, port);
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  for (long index = 0; index < count; index++) {
    int fd = accept(listener, NULL, NULL);
    if (fd < 0) die("accept:");
    pthread_t thread;
    if (pthread_create(&thread, &attributes, serve_one, (void*)(intptr_t)fd) != 0) die("thread");
  }
  /* The last threads finish their connections. */
  for (int wait = 0; wait < 1000; wait++) {
    pthread_mutex_lock(&counts_lock);
    long done = closed_at_once + checked + failures;
    pthread_mutex_unlock(&counts_lock);
    if (done == count) break;
    usleep(10000);
  }
  pthread_mutex_lock(&counts_lock);
  printf("served %ld: %ld closed at once, %ld checked, %ld failed\n", count, closed_at_once, checked,
         failures);
  int status = failures == 0 && closed_at_once + checked == count ? 0 : 1;
  pthread_mutex_unlock(&counts_lock);
  return status;
}

struct client_work {
  int port;
  long first, count;
  uint64_t seed;
  long wrong;
};

static int connect_loopback(int port) {
  struct sockaddr_storage address;
  socklen_t length = loopback_address(&address, 0, port);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr*)&address, length) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static const char* one_connection(int port, long index, uint64_t* state, unsigned char* data) {
  int fd = connect_loopback(port);
  if (fd < 0) return "connect failed";
  const char* wrong = NULL;
  if (index % 4 == 1) {
    /* Closed before any byte: the server reads its EOF. */
  } else if (index % 4 == 0) {
    unsigned char byte = 'C';
    if (write_all(fd, &byte, 1) != 0) wrong = "sending C failed";
    else if (read(fd, &byte, 1) != 0) wrong = "a closed connection read something other than EOF";
  } else {
    uint32_t length = 1 + (uint32_t)(splitmix64(state) % (256u * 1024));
    struct byte_stream stream;
    byte_stream_init(&stream, (uint64_t)index);
    data[0] = 'D';
    memcpy(data + 1, &length, sizeof(length));
    byte_stream_fill(&stream, data + 5, length);
    uint32_t crc = 0;
    if (write_all(fd, data, 5 + (size_t)length) != 0) wrong = "sending failed";
    else if (read_all(fd, &crc, sizeof(crc)) != 0) wrong = "no CRC came back";
    else if (crc != crc32_update(0, data + 5, length)) wrong = "the CRC does not match";
  }
  close(fd);
  return wrong;
}

static void* run_client(void* argument) {
  struct client_work* work = argument;
  uint64_t state = work->seed + (uint64_t)work->first;
  unsigned char* data = malloc(5 + 256 * 1024);
  if (data == NULL) die("out of memory");
  for (long index = work->first; index < work->first + work->count; index++) {
    const char* wrong = one_connection(work->port, index, &state, data);
    if (wrong != NULL) {
      fprintf(stderr, "reuse_storm: connection %ld: %s (%s)\n", index, wrong, strerror(errno));
      work->wrong++;
    }
  }
  free(data);
  return NULL;
}

static int make_connections(int port, long count, long threads, uint64_t seed) {
  if (threads < 1 || threads > 64) die("between 1 and 64 threads");
  struct client_work work[64];
  pthread_t thread[64];
  long first = 0;
  for (long index = 0; index < threads; index++) {
    long share = count / threads + (index < count % threads ? 1 : 0);
    work[index] = (struct client_work){port, first, share, seed, 0};
    first += share;
    if (pthread_create(&thread[index], NULL, run_client, &work[index]) != 0) die("thread");
  }
  long wrong = 0;
  for (long index = 0; index < threads; index++) {
    pthread_join(thread[index], NULL);
    wrong += work[index].wrong;
  }
  printf("%ld connections, %ld wrong\n", count, wrong);
  return wrong == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  program_name = "reuse_storm";
  crc32_update(0, NULL, 0); /* its table, before any thread */
  if (argc == 4 && strcmp(argv[1], "server") == 0)
    return serve((int)parse_number(argv[2], "port"), parse_number(argv[3], "count"));
  if (argc == 6 && strcmp(argv[1], "client") == 0)
    return make_connections((int)parse_number(argv[2], "port"), parse_number(argv[3], "count"),
                            parse_number(argv[4], "threads"), (uint64_t)parse_number(argv[5], "seed"));
  fprintf(stderr, "usage: reuse_storm server PORT COUNT\n"
                  "       reuse_storm client PORT COUNT THREADS SEED\n");
  return 2;
}
