/* conversation: a strictly alternating dialogue over one TCP connection, the
 * speaking order a request/response protocol has. ROUNDS turns each; in every
 * turn the speaker writes one message of seeded pseudo-random size (1 B to
 * 256 KiB, log-uniform, so small ones are common) and the listener reads
 * exactly that many bytes (it derives the size from the same seed, so no
 * length prefix is needed) and checks every one before the roles swap. A
 * transport that holds a message back until more data comes, or that needs
 * the listener to speak before it delivers, stalls here at once.
 *
 *   conversation server PORT_FILE FIRST ROUNDS   (listens on 127.0.0.1)
 *   conversation client PORT FIRST ROUNDS
 * FIRST (client or server) says who speaks first; both ends must agree.
 *
 * At the end each side half-closes, reads until end of stream (which must
 * come with no further byte), closes, and prints on stderr the turns done and
 * the longest single turn in milliseconds (a turn as this side saw it: from
 * the end of the previous one until its message was wholly written or read)
 * and the time all turns took.
 * The exit status is 0 only if every byte was verified. */
#define _GNU_SOURCE
#include <signal.h>
#include <time.h>

#include "common.h"

#define LARGEST_MESSAGE (256u << 10)

/* Seeds shared by both ends: one for the message sizes, one byte stream per
 * direction. */
#define SIZE_SEED 0x5EEDC0DEull
#define CLIENT_STREAM_SEED 3
#define SERVER_STREAM_SEED 4

/* 1 B .. 256 KiB, log-uniform. */
static size_t message_size(uint64_t* state) {
  uint64_t random = splitmix64(state);
  unsigned bits = (unsigned)(random % 19); /* 2^0 .. 2^18 */
  uint64_t size = 1 + ((random >> 8) & ((1ull << bits) - 1));
  return (size_t)(size > LARGEST_MESSAGE ? LARGEST_MESSAGE : size);
}

static double now_ms(void) {
  struct timespec time;
  clock_gettime(CLOCK_MONOTONIC, &time);
  return (double)time.tv_sec * 1e3 + (double)time.tv_nsec / 1e6;
}

/* Reads exactly length bytes; 0 on success, -1 (with a message) otherwise. */
static int read_exactly(int fd, unsigned char* buffer, size_t length, long turn) {
  size_t done = 0;
  while (done < length) {
    ssize_t got = read(fd, buffer + done, length - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      fprintf(stderr, "conversation: turn %ld: read after %zu of %zu bytes: %s\n", turn, done, length,
              got == 0 ? "end of stream" : strerror(errno));
      return -1;
    }
    done += (size_t)got;
  }
  return 0;
}

static int converse(int fd, int is_server, int server_first, long rounds) {
  unsigned char* buffer = malloc(LARGEST_MESSAGE);
  unsigned char* expected = malloc(LARGEST_MESSAGE);
  if (buffer == NULL || expected == NULL) die("out of memory");
  struct byte_stream outgoing, incoming;
  byte_stream_init(&outgoing, is_server ? SERVER_STREAM_SEED : CLIENT_STREAM_SEED);
  byte_stream_init(&incoming, is_server ? CLIENT_STREAM_SEED : SERVER_STREAM_SEED);
  uint64_t sizes = SIZE_SEED;
  int speaking = is_server == server_first;
  long turns = 2 * rounds, turn = 0;
  unsigned long long sent = 0, received = 0;
  double started = now_ms(), longest = 0, previous_end = started;
  long longest_turn = -1;
  int failed = 0;
  for (; turn < turns && !failed; ++turn, speaking = !speaking) {
    size_t length = message_size(&sizes);
    if (speaking) {
      byte_stream_fill(&outgoing, buffer, length);
      if (write_all(fd, buffer, length) != 0) {
        fprintf(stderr, "conversation: turn %ld: write of %zu bytes: %s\n", turn, length, strerror(errno));
        failed = 1;
        break;
      }
      sent += length;
    } else {
      if (read_exactly(fd, buffer, length, turn) != 0) {
        failed = 1;
        break;
      }
      byte_stream_fill(&incoming, expected, length);
      if (memcmp(buffer, expected, length) != 0) {
        size_t at = 0;
        while (buffer[at] == expected[at]) at++;
        fprintf(stderr, "conversation: turn %ld: wrong byte at offset %zu of %zu (stream offset %llu)\n",
                turn, at, length, received + at);
        failed = 1;
        break;
      }
      received += length;
    }
    double end = now_ms();
    if (end - previous_end > longest) {
      longest = end - previous_end;
      longest_turn = turn;
    }
    previous_end = end;
  }
  /* An orderly end: our FIN, then the peer's, with nothing in between (a
   * byte here would be one the peer sent that we never asked for). */
  if (!failed) {
    if (shutdown(fd, SHUT_WR) != 0) {
      fprintf(stderr, "conversation: shutdown: %s\n", strerror(errno));
      failed = 1;
    } else {
      ssize_t got;
      while ((got = read(fd, buffer, LARGEST_MESSAGE)) < 0 && errno == EINTR) {
      }
      if (got != 0) {
        fprintf(stderr, "conversation: after the last turn: %s\n",
                got < 0 ? strerror(errno) : "unexpected bytes instead of end of stream");
        failed = 1;
      }
    }
  }
  if (close(fd) != 0) {
    fprintf(stderr, "conversation: close: %s\n", strerror(errno));
    failed = 1;
  }
  fprintf(stderr,
          "conversation: %s: %ld of %ld turns done (sent %llu, received and verified %llu bytes); "
          "longest turn %.1f ms (turn %ld); all turns in %.0f ms\n",
          is_server ? "server" : "client", turn, turns, sent, received, longest, longest_turn,
          previous_end - started);
  free(buffer);
  free(expected);
  return failed;
}

int main(int argc, char** argv) {
  program_name = "conversation";
  const char* usage =
      "usage: conversation server PORT_FILE FIRST ROUNDS | client PORT FIRST ROUNDS (FIRST: client|server)";
  if (argc != 5) die("%s", usage);
  int is_server = strcmp(argv[1], "server") == 0;
  if (!is_server && strcmp(argv[1], "client") != 0) die("%s", usage);
  int server_first = strcmp(argv[3], "server") == 0;
  if (!server_first && strcmp(argv[3], "client") != 0) die("%s", usage);
  long rounds = parse_number(argv[4], "ROUNDS");
  /* A peer that vanishes must show up as an error message, not a silent death. */
  signal(SIGPIPE, SIG_IGN);
  report_qpsock_state(program_name);

  int fd;
  if (is_server) {
    int listener = listen_loopback(0, 0);
    struct sockaddr_in bound;
    socklen_t length = sizeof(bound);
    if (getsockname(listener, (struct sockaddr*)&bound, &length) != 0) die("getsockname:");
    /* Written under another name and renamed: a reader never sees half a port. */
    char temporary[4096];
    snprintf(temporary, sizeof(temporary), "%s.tmp", argv[2]);
    FILE* port_file = fopen(temporary, "w");
    if (port_file == NULL) die("%s:", temporary);
    fprintf(port_file, "%d\n", ntohs(bound.sin_port));
    if (fclose(port_file) != 0 || rename(temporary, argv[2]) != 0) die("%s:", argv[2]);
    fd = accept(listener, NULL, NULL);
    if (fd < 0) die("accept:");
    close(listener);
  } else {
    struct sockaddr_storage address;
    socklen_t length = loopback_address(&address, 0, (int)parse_number(argv[2], "PORT"));
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) die("socket:");
    if (connect(fd, (struct sockaddr*)&address, length) != 0) die("connect:");
  }
  return converse(fd, is_server, server_first, rounds);
}
