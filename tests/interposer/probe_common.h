/* Shared by the interposer probes: a loopback TCP connection and checked I/O. */
#ifndef QPSOCK_PROBE_COMMON_H
#define QPSOCK_PROBE_COMMON_H

#include <netinet/tcp.h>

#include "../programs/common.h"

#define PROBE_CHECK(condition)                                                       \
  do {                                                                               \
    if (!(condition)) {                                                              \
      fprintf(stderr, "%s:%d: check failed: %s (errno %d: %s)\n", __FILE__, __LINE__, \
              #condition, errno, strerror(errno));                                   \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

/* Connects a loopback TCP pair: *client and *server are the two ends. */
static inline void probe_connect_pair(int* client, int* server) {
  int listener = listen_loopback(0, 0);
  struct sockaddr_storage address;
  socklen_t length = sizeof(address);
  PROBE_CHECK(getsockname(listener, (struct sockaddr*)&address, &length) == 0);
  *client = socket(AF_INET, SOCK_STREAM, 0);
  PROBE_CHECK(*client >= 0);
  PROBE_CHECK(connect(*client, (struct sockaddr*)&address, length) == 0);
  *server = accept(listener, NULL, NULL);
  PROBE_CHECK(*server >= 0);
  close(listener);
}

static inline void probe_write_all(int fd, const void* data, size_t length) {
  PROBE_CHECK(write_all(fd, data, length) == 0);
}

static inline void probe_read_all(int fd, void* data, size_t length) {
  char* cursor = (char*)data;
  while (length > 0) {
    ssize_t got = read(fd, cursor, length);
    if (got < 0 && errno == EINTR) continue;
    PROBE_CHECK(got > 0);
    cursor += got;
    length -= (size_t)got;
  }
}

/* A round trip of `length` bytes over a fresh loopback pair, verified. */
static inline void probe_round_trip(size_t length) {
  int client, server;
  probe_connect_pair(&client, &server);
  char* sent = (char*)malloc(length);
  char* received = (char*)malloc(length);
  PROBE_CHECK(sent != NULL && received != NULL);
  for (size_t index = 0; index < length; ++index) sent[index] = (char)(index * 31 + 7);
  probe_write_all(client, sent, length);
  probe_read_all(server, received, length);
  PROBE_CHECK(memcmp(sent, received, length) == 0);
  free(sent);
  free(received);
  close(client);
  close(server);
}

#endif
