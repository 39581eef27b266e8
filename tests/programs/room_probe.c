/* How much a writer may write before it would block, with nobody reading:
 * the room a connection gives (the kernel's: the writer's send buffer plus
 * the reader's receive buffer).
 *
 *   room_probe [--port N] [--sndbuf BYTES] [--rcvbuf BYTES] [--server-writes]
 *              [--settle MS] [--address IPV4 [--source IPV4]]
 *
 * Forks: the parent accepts, the child connects (from SOURCE to ADDRESS,
 * default loopback). Both set SO_SNDBUF and SO_RCVBUF as given before they
 * connect or listen. Two one-byte round trips first (an upgrade starts at
 * the server's first read; --settle waits that long between them, for one
 * that takes time, as over RDMA), then the writer (the client, or the
 * server with --server-writes) writes non-blocking until EAGAIN, and goes
 * on until 200 ms pass without a byte taken. Then the reader reads every
 * byte and checks it, and the writer waits (5 s at most) for POLLOUT.
 * Prints, from the writer: "room BYTES writable-at-eagain no|yes
 * writable-after-read yes|no"; from the reader: "read BYTES intact". */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <time.h>

#include "common.h"

struct options {
  int port;
  long sndbuf, rcvbuf, settle_ms;
  int server_writes;
  const char *address, *source;
};

static void set_buffers(int fd, const struct options* options) {
  int value;
  if (options->sndbuf > 0) {
    value = (int)options->sndbuf;
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &value, sizeof(value)) != 0) die("SO_SNDBUF:");
  }
  if (options->rcvbuf > 0) {
    value = (int)options->rcvbuf;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &value, sizeof(value)) != 0) die("SO_RCVBUF:");
  }
}

static socklen_t ipv4_address(struct sockaddr_storage* storage, const char* text, int port) {
  socklen_t length = loopback_address(storage, 0, port);
  if (text != NULL && inet_pton(AF_INET, text, &((struct sockaddr_in*)storage)->sin_addr) != 1)
    die("bad address '%s'", text);
  return length;
}

static void sleep_ms(long milliseconds) {
  struct timespec left = {milliseconds / 1000, (milliseconds % 1000) * 1000000L};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

static long now_ms(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec * 1000L + now.tv_nsec / 1000000L;
}

static void read_exactly(int fd, void* buffer, size_t length) {
  char* cursor = buffer;
  while (length > 0) {
    ssize_t got = read(fd, cursor, length);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) die("read:");
    cursor += got;
    length -= (size_t)got;
  }
}

static int writable_now(int fd, int timeout_ms) {
  struct pollfd entry = {fd, POLLOUT, 0};
  return poll(&entry, 1, timeout_ms) == 1 && (entry.revents & POLLOUT) != 0;
}

/* Writes the byte stream non-blocking until no byte is taken for 200 ms. */
static unsigned long long fill(int fd, int* writable_at_eagain) {
  static unsigned char chunk[64 << 10];
  struct byte_stream stream;
  byte_stream_init(&stream, 42);
  unsigned long long total = 0;
  size_t size = sizeof(chunk);
  size_t pending = 0; /* bytes of chunk generated and not yet taken */
  size_t offset = 0;
  long quiet_since = -1;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  *writable_at_eagain = 0;
  for (;;) {
    if (pending == 0) {
      byte_stream_fill(&stream, chunk, sizeof(chunk));
      pending = sizeof(chunk);
      offset = 0;
    }
    size_t want = pending < size ? pending : size;
    ssize_t written = send(fd, chunk + offset, want, MSG_NOSIGNAL);
    if (written > 0) {
      total += (unsigned long long)written;
      offset += (size_t)written;
      pending -= (size_t)written;
      quiet_since = -1;
      continue;
    }
    if (written < 0 && errno == EINTR) continue;
    if (written < 0 && errno != EAGAIN && errno != EWOULDBLOCK) die("send:");
    /* Smaller writes may still fit; at one byte, wait for the room to settle. */
    if (size > 1) {
      size /= 2;
      continue;
    }
    if (quiet_since < 0) {
      quiet_since = now_ms();
      *writable_at_eagain = writable_now(fd, 0);
    } else if (now_ms() - quiet_since >= 200) {
      return total;
    }
    sleep_ms(20);
    size = sizeof(chunk);
  }
}

/* Reads `total` bytes and checks them against the writer's stream. */
static int drain(int fd, unsigned long long total) {
  static unsigned char buffer[64 << 10], expected[64 << 10];
  struct byte_stream stream;
  byte_stream_init(&stream, 42);
  unsigned long long got = 0;
  int intact = 1;
  while (got < total) {
    size_t want = total - got < sizeof(buffer) ? (size_t)(total - got) : sizeof(buffer);
    ssize_t count = read(fd, buffer, want);
    if (count < 0 && errno == EINTR) continue;
    if (count <= 0) die("reading the room back:");
    byte_stream_fill(&stream, expected, (size_t)count);
    if (memcmp(buffer, expected, (size_t)count) != 0) intact = 0;
    got += (unsigned long long)count;
  }
  return intact;
}

/* Runs one end. `control` carries the total from the writer to the reader,
 * then the reader's "done" back. */
static int run_end(int fd, int writer, int control, const struct options* options, int client) {
  unsigned char byte = 'x';
  /* Two round trips, the client's byte first, so that both directions switch. */
  for (int round = 0; round < 2; round++) {
    if (client) {
      if (write_all(fd, &byte, 1) != 0) die("write:");
      read_exactly(fd, &byte, 1);
    } else {
      read_exactly(fd, &byte, 1);
      if (write_all(fd, &byte, 1) != 0) die("write:");
    }
    if (round == 0 && options->settle_ms > 0) sleep_ms(options->settle_ms);
  }
  if (writer) {
    int writable_at_eagain = 0;
    unsigned long long total = fill(fd, &writable_at_eagain);
    if (write(control, &total, sizeof(total)) != (ssize_t)sizeof(total)) die("control:");
    int writable_after = writable_now(fd, 5000);
    printf("room %llu writable-at-eagain %s writable-after-read %s\n", total,
           writable_at_eagain ? "yes" : "no", writable_after ? "yes" : "no");
    fflush(stdout);
    char done;
    read_exactly(control, &done, 1);
    return 0;
  }
  unsigned long long total = 0;
  read_exactly(control, &total, sizeof(total));
  int intact = drain(fd, total);
  printf("read %llu %s\n", total, intact ? "intact" : "differs");
  fflush(stdout);
  if (write(control, "d", 1) != 1) die("control:");
  return intact ? 0 : 1;
}

int main(int argc, char** argv) {
  program_name = "room_probe";
  struct options options = {0, 0, 0, 0, 0, NULL, NULL};
  for (int index = 1; index < argc; index++) {
    const char* name = argv[index];
    if (strcmp(name, "--server-writes") == 0) {
      options.server_writes = 1;
      continue;
    }
    if (index + 1 >= argc) die("%s needs a value", name);
    const char* value = argv[++index];
    if (strcmp(name, "--port") == 0) options.port = (int)parse_number(value, "port");
    else if (strcmp(name, "--sndbuf") == 0) options.sndbuf = parse_number(value, "--sndbuf");
    else if (strcmp(name, "--rcvbuf") == 0) options.rcvbuf = parse_number(value, "--rcvbuf");
    else if (strcmp(name, "--settle") == 0) options.settle_ms = parse_number(value, "--settle");
    else if (strcmp(name, "--address") == 0) options.address = value;
    else if (strcmp(name, "--source") == 0) options.source = value;
    else die("unknown option %s", name);
  }
  struct sockaddr_storage address;
  socklen_t length = ipv4_address(&address, options.address, options.port);
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) die("socket:");
  int one = 1;
  if (setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) die("SO_REUSEADDR:");
  set_buffers(listener, &options); /* accepted sockets inherit them */
  if (bind(listener, (struct sockaddr*)&address, length) != 0) die("bind:");
  if (listen(listener, 1) != 0) die("listen:");
  if (getsockname(listener, (struct sockaddr*)&address, &length) != 0) die("getsockname:");

  int control[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, control) != 0) die("socketpair:");
  pid_t child = fork();
  if (child < 0) die("fork:");
  if (child == 0) {
    close(listener);
    close(control[0]);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) die("socket:");
    set_buffers(fd, &options);
    if (options.source != NULL) {
      struct sockaddr_storage here;
      socklen_t here_length = ipv4_address(&here, options.source, 0);
      if (bind(fd, (struct sockaddr*)&here, here_length) != 0) die("bind %s:", options.source);
    }
    if (connect(fd, (struct sockaddr*)&address, length) != 0) die("connect:");
    exit(run_end(fd, !options.server_writes, control[1], &options, 1));
  }
  close(control[1]);
  int fd = accept(listener, NULL, NULL);
  if (fd < 0) die("accept:");
  int status = run_end(fd, options.server_writes, control[0], &options, 0);
  int child_status = 0;
  if (waitpid(child, &child_status, 0) != child) die("waitpid:");
  if (!WIFEXITED(child_status) || WEXITSTATUS(child_status) != 0) status = 1;
  return status;
}
