/* echo_client: opens CONNECTIONS concurrent non-blocking connections to an
 * echo server on loopback (one thread, poll), sends each a deterministic
 * pseudo-random stream of BYTES bytes in random-sized writes, half-closes,
 * and checks every echoed byte against the stream it sent. Prints one line
 * per connection (bytes and CRC-32 of what came back) and exits 0 only if
 * every connection got back exactly what it sent.
 *
 * usage: echo_client [-6] [-B] [-R BYTES] [-c CONNECTIONS] [-b BYTES] [-s SEED] [-w MAX_WRITE]
 *                    [-t IDLE_SECONDS] PORT
 *
 * -B: blocking sockets and no poll at all. All connections are opened first, so that the server
 * holds them at once, then served in turn: one random-sized write of at most
 * 64 KiB (default socket buffers and stream rings hold that much in flight,
 * so the write does not wait for our read), then its echo read back and
 * checked. Same streams, so the same report as without -B. -t does not apply.
 *
 * -R BYTES (with -B): once a connection has BYTES echoed, renumber its socket
 * as a shell does (dup to a number of 100 or more, then close the old one, or
 * dup2 over it), and put a pipe holding one unread byte on the old number, so
 * that anything still watching that number finds it readable and not a
 * socket. The rest of the stream and its end must go on as before.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <time.h>

#include "common.h"

struct connection {
  int fd;
  int connected;
  int write_closed;
  int done;
  unsigned long long sent, received;
  struct byte_stream send_stream, expect_stream;
  uint64_t size_state;
  unsigned char* pending; /* bytes generated but not yet written */
  size_t pending_offset, pending_length;
  uint32_t crc;
  int renumbered_pipe[2]; /* -R: the pipe on the socket's old number (0, 0: none) */
};

static size_t random_size(uint64_t* state, size_t maximum) {
  return 1 + (size_t)(splitmix64(state) % maximum);
}

#define BLOCKING_CHUNK (64u << 10)

static int read_exactly(int fd, unsigned char* buffer, size_t length) {
  size_t done = 0;
  while (done < length) {
    ssize_t got = read(fd, buffer + done, length - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return -1;
    if (got == 0) {
      errno = 0;
      return -1;
    }
    done += (size_t)got;
  }
  return 0;
}

/* The -B mode: blocking I/O, never poll (see the top). */
/* The -R step: fd moves to 100 or above; its old number becomes a readable
 * pipe, put there after a close of the socket's old number (even connections)
 * or by dup2 over it (odd ones). */
static void renumber(struct connection* c, long index, int pipe_ends[2]) {
  int moved = fcntl(c->fd, F_DUPFD, 100);
  if (moved < 0) die("F_DUPFD:");
  if (index % 2 == 0 && close(c->fd) != 0) die("close:");
  if (pipe(pipe_ends) != 0) die("pipe:");
  if (pipe_ends[0] != c->fd) {
    if (dup2(pipe_ends[0], c->fd) < 0) die("dup2:");
    close(pipe_ends[0]);
    pipe_ends[0] = c->fd;
  }
  if (write(pipe_ends[1], "x", 1) != 1) die("write to the pipe:");
  c->fd = moved;
}

static int run_blocking(struct connection* connections, long count, unsigned long long bytes,
                        size_t max_write, int ipv6, int port, unsigned long long renumber_after) {
  struct sockaddr_storage address;
  socklen_t address_length = loopback_address(&address, ipv6, port);
  size_t chunk = max_write < BLOCKING_CHUNK ? max_write : BLOCKING_CHUNK;
  unsigned char* read_buffer = malloc(chunk);
  unsigned char* expected = malloc(chunk);
  if (read_buffer == NULL || expected == NULL) die("out of memory");
  for (long index = 0; index < count; ++index) {
    struct connection* c = &connections[index];
    c->fd = socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0) die("socket:");
    if (connect(c->fd, (struct sockaddr*)&address, address_length) != 0) die("connection %ld: connect:", index);
  }
  long remaining = count;
  while (remaining > 0) {
    for (long index = 0; index < count; ++index) {
      struct connection* c = &connections[index];
      if (c->done) continue;
      if (c->sent < bytes) {
        size_t size = random_size(&c->size_state, chunk);
        if (size > bytes - c->sent) size = (size_t)(bytes - c->sent);
        byte_stream_fill(&c->send_stream, c->pending, size);
        if (write_all(c->fd, c->pending, size) != 0) {
          fprintf(stderr, "echo_client: connection %ld: write: %s\n", index, strerror(errno));
          return 1;
        }
        c->sent += size;
        if (read_exactly(c->fd, read_buffer, size) != 0) {
          fprintf(stderr, "echo_client: connection %ld: read after %llu of %llu bytes: %s\n", index,
                  c->received, bytes, errno == 0 ? "early EOF" : strerror(errno));
          return 1;
        }
        byte_stream_fill(&c->expect_stream, expected, size);
        if (memcmp(expected, read_buffer, size) != 0) {
          size_t at = 0;
          while (expected[at] == read_buffer[at]) ++at;
          fprintf(stderr, "echo_client: connection %ld: wrong byte at offset %llu: got 0x%02x, sent 0x%02x\n",
                  index, c->received + at, read_buffer[at], expected[at]);
          return 1;
        }
        c->crc = crc32_update(c->crc, read_buffer, size);
        if (renumber_after > 0 && c->received < renumber_after && c->received + size >= renumber_after)
          renumber(c, index, c->renumbered_pipe);
        c->received += size;
        continue;
      }
      /* All echoed: our FIN, then the server's with nothing before it. */
      if (shutdown(c->fd, SHUT_WR) != 0) die("connection %ld: shutdown:", index);
      ssize_t got;
      while ((got = read(c->fd, read_buffer, chunk)) < 0 && errno == EINTR) {
      }
      if (got != 0) {
        fprintf(stderr, "echo_client: connection %ld: %s after the last echo\n", index,
                got < 0 ? strerror(errno) : "extra bytes instead of EOF");
        return 1;
      }
      close(c->fd);
      if (c->renumbered_pipe[1] > 0) {
        close(c->renumbered_pipe[0]);
        close(c->renumbered_pipe[1]);
      }
      c->done = 1;
      remaining--;
    }
  }
  free(read_buffer);
  free(expected);
  return 0;
}

int main(int argc, char** argv) {
  program_name = "echo_client";
  int ipv6 = 0, blocking = 0;
  unsigned long long renumber_after = 0;
  long count = 16, idle_seconds = 20;
  unsigned long long bytes = 4ull << 20;
  uint64_t seed = 1;
  size_t max_write = 256 * 1024;
  int option;
  const char* usage =
      "usage: echo_client [-6] [-B] [-R BYTES] [-c CONNECTIONS] [-b BYTES] [-s SEED] [-w MAX_WRITE] [-t IDLE] PORT";
  while ((option = getopt(argc, argv, "6BR:c:b:s:w:t:")) != -1) {
    switch (option) {
      case '6': ipv6 = 1; break;
      case 'B': blocking = 1; break;
      case 'R': renumber_after = (unsigned long long)parse_number(optarg, "renumbering point"); break;
      case 'c': count = parse_number(optarg, "connection count"); break;
      case 'b': bytes = (unsigned long long)parse_number(optarg, "byte count"); break;
      case 's': seed = (uint64_t)parse_number(optarg, "seed"); break;
      case 'w': max_write = (size_t)parse_number(optarg, "write size"); break;
      case 't': idle_seconds = parse_number(optarg, "idle timeout"); break;
      default: die("%s", usage);
    }
  }
  if (optind + 1 != argc || count < 1 || max_write < 1 || (renumber_after > 0 && !blocking))
    die("%s", usage);
  int port = (int)parse_number(argv[optind], "port");
  signal(SIGPIPE, SIG_IGN);
  report_qpsock_state(program_name);

  struct connection* connections = calloc((size_t)count, sizeof(*connections));
  struct pollfd* polls = calloc((size_t)count, sizeof(*polls));
  unsigned char* read_buffer = malloc(1 << 16);
  unsigned char* expected = malloc(1 << 16);
  if (connections == NULL || polls == NULL || read_buffer == NULL || expected == NULL) die("out of memory");

  struct sockaddr_storage address;
  socklen_t address_length = loopback_address(&address, ipv6, port);
  for (long index = 0; index < count; ++index) {
    struct connection* c = &connections[index];
    uint64_t stream_seed = seed * 1000003u + (uint64_t)index;
    byte_stream_init(&c->send_stream, stream_seed);
    byte_stream_init(&c->expect_stream, stream_seed);
    c->size_state = ~stream_seed;
    c->pending = malloc(max_write);
    if (c->pending == NULL) die("out of memory");
    if (blocking) continue; /* run_blocking connects */
    c->fd = socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (c->fd < 0) die("socket:");
    if (connect(c->fd, (struct sockaddr*)&address, address_length) == 0) {
      c->connected = 1;
    } else if (errno != EINPROGRESS) {
      die("connection %ld: connect:", index);
    }
  }

  /* With -B everything is done here, and the poll loop below has nothing left. */
  int failed = blocking ? run_blocking(connections, count, bytes, max_write, ipv6, port, renumber_after) : 0;
  long remaining = blocking ? 0 : count;
  while (remaining > 0 && !failed) {
    for (long index = 0; index < count; ++index) {
      struct connection* c = &connections[index];
      polls[index].fd = c->done ? -1 : c->fd;
      polls[index].events = POLLIN;
      if (!c->connected || !c->write_closed) polls[index].events |= POLLOUT;
      polls[index].revents = 0;
    }
    int ready = poll(polls, (nfds_t)count, (int)(idle_seconds * 1000));
    if (ready < 0) {
      if (errno == EINTR) continue;
      die("poll:");
    }
    if (ready == 0) {
      fprintf(stderr, "echo_client: no progress for %lds\n", idle_seconds);
      for (long index = 0; index < count; ++index) {
        struct connection* c = &connections[index];
        if (!c->done)
          fprintf(stderr, "  connection %ld: sent %llu received %llu write_closed %d\n", index,
                  c->sent, c->received, c->write_closed);
      }
      return 1;
    }
    for (long index = 0; index < count && !failed; ++index) {
      struct connection* c = &connections[index];
      short revents = polls[index].revents;
      if (c->done || revents == 0) continue;
      if (!c->connected) {
        int error = 0;
        socklen_t length = sizeof(error);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) die("getsockopt:");
        if (error != 0) {
          errno = error;
          die("connection %ld: connect:", index);
        }
        c->connected = 1;
      }
      /* Send: one random-sized write, resumed after partial writes. */
      if ((revents & (POLLOUT | POLLERR)) && !c->write_closed) {
        if (c->pending_offset == c->pending_length && c->sent < bytes) {
          size_t size = random_size(&c->size_state, max_write);
          if (size > bytes - c->sent) size = (size_t)(bytes - c->sent);
          byte_stream_fill(&c->send_stream, c->pending, size);
          c->pending_offset = 0;
          c->pending_length = size;
        }
        if (c->pending_offset < c->pending_length) {
          ssize_t written = write(c->fd, c->pending + c->pending_offset,
                                  c->pending_length - c->pending_offset);
          if (written < 0 && errno != EAGAIN && errno != EINTR) {
            fprintf(stderr, "echo_client: connection %ld: write: %s\n", index, strerror(errno));
            failed = 1;
            break;
          }
          if (written > 0) {
            c->pending_offset += (size_t)written;
            c->sent += (unsigned long long)written;
          }
        }
        if (c->sent == bytes && c->pending_offset == c->pending_length) {
          if (shutdown(c->fd, SHUT_WR) != 0) die("connection %ld: shutdown:", index);
          c->write_closed = 1;
        }
      }
      /* Receive: one random-sized read, checked byte by byte. */
      if (revents & (POLLIN | POLLHUP | POLLERR)) {
        size_t size = random_size(&c->size_state, 1 << 16);
        ssize_t got = read(c->fd, read_buffer, size);
        if (got < 0) {
          if (errno == EAGAIN || errno == EINTR) continue;
          fprintf(stderr, "echo_client: connection %ld: read: %s\n", index, strerror(errno));
          failed = 1;
          break;
        }
        if (got == 0) {
          if (!c->write_closed || c->received != bytes) {
            fprintf(stderr, "echo_client: connection %ld: early EOF after %llu of %llu bytes (sent %llu)\n",
                    index, c->received, bytes, c->sent);
            failed = 1;
            break;
          }
          close(c->fd);
          c->done = 1;
          remaining--;
          continue;
        }
        if (c->received + (unsigned long long)got > c->sent) {
          fprintf(stderr, "echo_client: connection %ld: received %llu bytes but sent only %llu\n", index,
                  c->received + (unsigned long long)got, c->sent);
          failed = 1;
          break;
        }
        byte_stream_fill(&c->expect_stream, expected, (size_t)got);
        if (memcmp(expected, read_buffer, (size_t)got) != 0) {
          size_t at = 0;
          while (expected[at] == read_buffer[at]) ++at;
          fprintf(stderr, "echo_client: connection %ld: wrong byte at offset %llu: got 0x%02x, sent 0x%02x\n",
                  index, c->received + at, read_buffer[at], expected[at]);
          failed = 1;
          break;
        }
        c->crc = crc32_update(c->crc, read_buffer, (size_t)got);
        c->received += (unsigned long long)got;
      }
    }
  }
  if (failed) return 1;
  for (long index = 0; index < count; ++index)
    printf("connection %ld: %llu bytes crc32 %08x\n", index, connections[index].received,
           (unsigned)connections[index].crc);
  printf("echo_client: OK, %ld connections, %llu bytes each\n", count, bytes);
  return 0;
}
