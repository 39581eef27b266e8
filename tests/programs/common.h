/* Helpers shared by the integration-test programs: loopback addresses,
 * full writes, a deterministic byte stream and CRC-32. Header-only, C11. */
#ifndef QPSOCK_TEST_PROGRAMS_COMMON_H
#define QPSOCK_TEST_PROGRAMS_COMMON_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char* program_name = "program";

__attribute__((format(printf, 1, 2), noreturn)) static inline void die(const char* format, ...) {
  int saved = errno;
  va_list arguments;
  va_start(arguments, format);
  fprintf(stderr, "%s: ", program_name);
  vfprintf(stderr, format, arguments);
  va_end(arguments);
  if (saved != 0 && format[strlen(format) - 1] == ':') fprintf(stderr, " %s", strerror(saved));
  fputc('\n', stderr);
  exit(1);
}

static inline long parse_number(const char* text, const char* what) {
  char* end = NULL;
  errno = 0;
  long value = strtol(text, &end, 0);
  if (errno != 0 || end == text || *end != '\0' || value < 0) die("bad %s '%s'", what, text);
  return value;
}

/* A loopback address (127.0.0.1, or ::1 if ipv6) with the given port. */
static inline socklen_t loopback_address(struct sockaddr_storage* storage, int ipv6, int port) {
  memset(storage, 0, sizeof(*storage));
  if (ipv6) {
    struct sockaddr_in6* address = (struct sockaddr_in6*)storage;
    address->sin6_family = AF_INET6;
    address->sin6_port = htons((uint16_t)port);
    address->sin6_addr = in6addr_loopback;
    return sizeof(*address);
  }
  struct sockaddr_in* address = (struct sockaddr_in*)storage;
  address->sin_family = AF_INET;
  address->sin_port = htons((uint16_t)port);
  address->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return sizeof(*address);
}

/* A listening socket on loopback (close-on-exec: exec'd programs never see it). */
static inline int listen_loopback(int ipv6, int port) {
  struct sockaddr_storage address;
  socklen_t length = loopback_address(&address, ipv6, port);
  int fd = socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket:");
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) die("SO_REUSEADDR:");
  if (bind(fd, (struct sockaddr*)&address, length) != 0) die("bind port %d:", port);
  if (listen(fd, 128) != 0) die("listen:");
  return fd;
}

/* Writes all of buffer; 0 on success, -1 with errno on error. */
static inline int write_all(int fd, const void* buffer, size_t length) {
  const char* cursor = buffer;
  while (length > 0) {
    ssize_t written = write(fd, cursor, length);
    if (written < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    cursor += written;
    length -= (size_t)written;
  }
  return 0;
}

/* 1 if libqpsock.so is mapped into this process, 0 if not, -1 on error. */
static inline int qpsock_loaded(void) {
  FILE* maps = fopen("/proc/self/maps", "r");
  if (maps == NULL) return -1;
  char line[4096];
  int loaded = 0;
  while (fgets(line, sizeof(line), maps) != NULL) {
    if (strstr(line, "libqpsock.so") != NULL) loaded = 1;
  }
  fclose(maps);
  return loaded;
}

/* Prints "NAME: qpsock=loaded" (or absent) on stderr, for the test logs. */
static inline void report_qpsock_state(const char* name) {
  int loaded = qpsock_loaded();
  fprintf(stderr, "%s: qpsock=%s\n", name, loaded < 0 ? "unknown" : loaded ? "loaded" : "absent");
}

/* splitmix64: a deterministic pseudo-random source. */
static inline uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A byte stream from splitmix64, readable in pieces of any size. */
struct byte_stream {
  uint64_t state;
  uint64_t word;
  unsigned available; /* bytes of word not yet handed out */
};

static inline void byte_stream_init(struct byte_stream* stream, uint64_t seed) {
  stream->state = seed;
  stream->word = 0;
  stream->available = 0;
}

static inline void byte_stream_fill(struct byte_stream* stream, unsigned char* out, size_t length) {
  while (length > 0 && stream->available > 0) {
    *out++ = (unsigned char)stream->word;
    stream->word >>= 8;
    stream->available--;
    length--;
  }
  while (length >= 8) {
    uint64_t word = splitmix64(&stream->state);
    memcpy(out, &word, 8); /* little-endian hosts: same order as the byte path */
    out += 8;
    length -= 8;
  }
  if (length > 0) {
    stream->word = splitmix64(&stream->state);
    stream->available = 8;
    while (length > 0) {
      *out++ = (unsigned char)stream->word;
      stream->word >>= 8;
      stream->available--;
      length--;
    }
  }
}

/* CRC-32 (IEEE, as zlib and java.util.zip.CRC32 compute it). */
static inline uint32_t crc32_update(uint32_t crc, const unsigned char* data, size_t length) {
  static uint32_t table[256];
  static int ready = 0;
  if (!ready) {
    for (uint32_t index = 0; index < 256; ++index) {
      uint32_t value = index;
      for (int bit = 0; bit < 8; ++bit) value = (value & 1) ? (value >> 1) ^ 0xEDB88320u : value >> 1;
      table[index] = value;
    }
    ready = 1;
  }
  crc = ~crc;
  for (size_t index = 0; index < length; ++index) crc = table[(crc ^ data[index]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

#endif
