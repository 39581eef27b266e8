/* Peers that exit without closing: the reader must get every byte they
 * sent, then end of file, as TCP gives it (the dying process's kernel sends
 * the FIN once the bytes are out).
 *
 *   exit_after_send server PORT COUNT [ADDRESS]
 *     accepts COUNT connections one after another and reads each to its end;
 *     prints one line per connection: "INDEX BYTES eof" or "INDEX BYTES error:NAME".
 *   exit_after_send client PORT COUNT SEED MAX_BYTES [ADDRESS [SOURCE]]
 *     for each connection forks a child that connects, sends a pseudo-random
 *     amount (1 KiB to MAX_BYTES) and exits without closing: plainly, after
 *     shutdown(SHUT_WR), after one non-blocking send, or with every write
 *     MSG_MORE (by INDEX % 4); through exit or _exit (by INDEX / 4 % 2);
 *     prints "INDEX BYTES" with what the child's sends took.
 * ADDRESS (IPv4, default 127.0.0.1) is where the server listens and the
 * client connects; SOURCE, the IPv4 address the client binds (any port)
 * before it connects (tests/vm/rdma_upgrade.sh: 10.77.0.1 from 10.77.0.2).
 * EXIT_AFTER_SEND_PAUSE_MS=N: each child waits N ms between its connect and
 * its first send, time for an upgrade to RDMA (which the server begins at
 * its first read) to finish before the child sends and exits. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>

#include "common.h"

/* IPv4 address TEXT (loopback if NULL) with PORT. */
static socklen_t ipv4_address(struct sockaddr_storage* storage, const char* text, int port) {
  socklen_t length = loopback_address(storage, 0, port);
  if (text != NULL && inet_pton(AF_INET, text, &((struct sockaddr_in*)storage)->sin_addr) != 1)
    die("bad address '%s'", text);
  return length;
}

/* As listen_loopback, at IPv4 address HOST. */
static int listen_at(const char* host, int port) {
  struct sockaddr_storage address;
  socklen_t length = ipv4_address(&address, host, port);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket:");
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) die("SO_REUSEADDR:");
  if (bind(fd, (struct sockaddr*)&address, length) != 0) die("bind %s port %d:", host, port);
  if (listen(fd, 128) != 0) die("listen:");
  return fd;
}

static int serve(int port, long count, const char* host) {
  int listener = host == NULL ? listen_loopback(0, port) : listen_at(host, port);
  static unsigned char buffer[1 << 20];
  for (long index = 0; index < count; index++) {
    int fd = accept(listener, NULL, NULL);
    if (fd < 0) die("accept:");
    unsigned long long total = 0;
    for (;;) {
      ssize_t got = read(fd, buffer, sizeof(buffer));
      if (got > 0) {
        total += (unsigned long long)got;
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      if (got == 0) printf("%ld %llu eof\n", index, total);
      else printf("%ld %llu error:%s\n", index, total, strerrorname_np(errno));
      break;
    }
    fflush(stdout);
    close(fd);
  }
  return 0;
}

/* In the child: what it sent, written to `report`; then it exits without
 * closing the socket. */
static void send_and_exit(int port, const char* host, const char* source, long index, size_t bytes,
                          int report) {
  struct sockaddr_storage address;
  socklen_t length = ipv4_address(&address, host, port);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd >= 0 && source != NULL) {
    struct sockaddr_storage here;
    socklen_t here_length = ipv4_address(&here, source, 0);
    if (bind(fd, (struct sockaddr*)&here, here_length) != 0) die("bind %s:", source);
  }
  if (fd < 0 || connect(fd, (struct sockaddr*)&address, length) != 0) die("connect:");
  unsigned char* data = malloc(bytes);
  if (data == NULL) die("out of memory");
  struct byte_stream stream;
  byte_stream_init(&stream, (uint64_t)index);
  byte_stream_fill(&stream, data, bytes);
  const char* pause = getenv("EXIT_AFTER_SEND_PAUSE_MS");
  if (pause != NULL && *pause != '\0') {
    long milliseconds = parse_number(pause, "EXIT_AFTER_SEND_PAUSE_MS");
    struct timespec left = {milliseconds / 1000, (milliseconds % 1000) * 1000000L};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
  }
  unsigned long long sent = 0;
  switch (index % 4) {
    case 0:
    case 1:
      if (write_all(fd, data, bytes) != 0) die("send:");
      sent = bytes;
      if (index % 4 == 1 && shutdown(fd, SHUT_WR) != 0) die("shutdown:");
      break;
    case 2: {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      ssize_t once = send(fd, data, bytes, MSG_NOSIGNAL);
      sent = once > 0 ? (unsigned long long)once : 0;
      break;
    }
    default:
      /* Corked to the end: the last bytes wait for a write that never comes. */
      while (sent < bytes) {
        ssize_t written = send(fd, data + sent, bytes - sent, MSG_MORE | MSG_NOSIGNAL);
        if (written < 0 && errno != EINTR) die("send:");
        if (written > 0) sent += (unsigned long long)written;
      }
      break;
  }
  if (write(report, &sent, sizeof(sent)) != (ssize_t)sizeof(sent)) die("report:");
  /* exit runs the exit handlers (qpsock's among them); _exit does not. */
  if ((index / 4) % 2 == 0) exit(0);
  _exit(0);
}

static int send_all(int port, const char* host, const char* source, long count, uint64_t seed,
                    size_t max_bytes) {
  uint64_t state = seed;
  for (long index = 0; index < count; index++) {
    size_t bytes = 1024 + (size_t)(splitmix64(&state) % (max_bytes - 1024 + 1));
    int report[2];
    if (pipe(report) != 0) die("pipe:");
    pid_t child = fork();
    if (child < 0) die("fork:");
    if (child == 0) {
      close(report[0]);
      send_and_exit(port, host, source, index, bytes, report[1]);
    }
    close(report[1]);
    unsigned long long sent = 0;
    ssize_t got = read(report[0], &sent, sizeof(sent));
    close(report[0]);
    int status = 0;
    waitpid(child, &status, 0);
    if (got != (ssize_t)sizeof(sent) || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      die("connection %ld: the sending child failed", index);
    printf("%ld %llu\n", index, sent);
    fflush(stdout);
  }
  return 0;
}

int main(int argc, char** argv) {
  program_name = "exit_after_send";
  if ((argc == 4 || argc == 5) && strcmp(argv[1], "server") == 0)
    return serve((int)parse_number(argv[2], "port"), parse_number(argv[3], "count"),
                 argc == 5 ? argv[4] : NULL);
  if (argc >= 6 && argc <= 8 && strcmp(argv[1], "client") == 0) {
    size_t max_bytes = (size_t)parse_number(argv[5], "maximum");
    if (max_bytes < 1024) die("the maximum must be at least 1024");
    return send_all((int)parse_number(argv[2], "port"), argc >= 7 ? argv[6] : NULL,
                    argc == 8 ? argv[7] : NULL, parse_number(argv[3], "count"),
                    (uint64_t)parse_number(argv[4], "seed"), max_bytes);
  }
  fprintf(stderr, "usage: exit_after_send server PORT COUNT [ADDRESS]\n"
                  "       exit_after_send client PORT COUNT SEED MAX_BYTES [ADDRESS [SOURCE]]\n");
  return 2;
}
