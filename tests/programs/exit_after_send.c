/* Peers that exit without closing: the reader must get every byte they
 * sent, then end of file, as TCP gives it (the dying process's kernel sends
 * the FIN once the bytes are out).
 *
 *   exit_after_send server PORT COUNT
 *     accepts COUNT connections one after another and reads each to its end;
 *     prints one line per connection: "INDEX BYTES eof" or "INDEX BYTES error:NAME".
 *   exit_after_send client PORT COUNT SEED MAX_BYTES
 *     for each connection forks a child that connects, sends a pseudo-random
 *     amount (1 KiB to MAX_BYTES) and exits without closing: plainly, after
 *     shutdown(SHUT_WR), or after one non-blocking send (by INDEX % 3);
 *     prints "INDEX BYTES" with what the child's sends took. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/wait.h>

#include "common.h"

static int serve(int port, long count) {
  int listener = listen_loopback(0, port);
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
static void send_and_exit(int port, long index, size_t bytes, int report) {
  struct sockaddr_storage address;
  socklen_t length = loopback_address(&address, 0, port);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, (struct sockaddr*)&address, length) != 0) die("connect:");
  unsigned char* data = malloc(bytes);
  if (data == NULL) die("out of memory");
  struct byte_stream stream;
  byte_stream_init(&stream, (uint64_t)index);
  byte_stream_fill(&stream, data, bytes);
  unsigned long long sent = 0;
  switch (index % 3) {
    case 0:
    case 1:
      if (write_all(fd, data, bytes) != 0) die("send:");
      sent = bytes;
      if (index % 3 == 1 && shutdown(fd, SHUT_WR) != 0) die("shutdown:");
      break;
    default: {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      ssize_t once = send(fd, data, bytes, MSG_NOSIGNAL);
      sent = once > 0 ? (unsigned long long)once : 0;
      break;
    }
  }
  if (write(report, &sent, sizeof(sent)) != (ssize_t)sizeof(sent)) die("report:");
  _exit(0);
}

static int send_all(int port, long count, uint64_t seed, size_t max_bytes) {
  uint64_t state = seed;
  for (long index = 0; index < count; index++) {
    size_t bytes = 1024 + (size_t)(splitmix64(&state) % (max_bytes - 1024 + 1));
    int report[2];
    if (pipe(report) != 0) die("pipe:");
    pid_t child = fork();
    if (child < 0) die("fork:");
    if (child == 0) {
      close(report[0]);
      send_and_exit(port, index, bytes, report[1]);
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
  if (argc == 4 && strcmp(argv[1], "server") == 0)
    return serve((int)parse_number(argv[2], "port"), parse_number(argv[3], "count"));
  if (argc == 6 && strcmp(argv[1], "client") == 0) {
    size_t max_bytes = (size_t)parse_number(argv[5], "maximum");
    if (max_bytes < 1024) die("the maximum must be at least 1024");
    return send_all((int)parse_number(argv[2], "port"), parse_number(argv[3], "count"),
                    (uint64_t)parse_number(argv[4], "seed"), max_bytes);
  }
  fprintf(stderr, "usage: exit_after_send server PORT COUNT\n"
                  "       exit_after_send client PORT COUNT SEED MAX_BYTES\n");
  return 2;
}
