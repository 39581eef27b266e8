/* fd_echo: echoes on a connected TCP socket it inherited across exec.
 *
 * usage: fd_echo FD
 * Checks that FD is a connected stream socket, echoes every byte until EOF,
 * half-closes, waits for the peer's close and exits 0.
 */
#define _GNU_SOURCE
#include "common.h"

int main(int argc, char** argv) {
  program_name = "fd_echo";
  if (argc != 2) die("usage: fd_echo FD");
  int fd = (int)parse_number(argv[1], "fd");
  report_qpsock_state(program_name);
  int type = 0;
  socklen_t length = sizeof(type);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) != 0) die("fd %d is not a socket:", fd);
  if (type != SOCK_STREAM) die("fd %d is not a stream socket", fd);
  struct sockaddr_storage peer;
  length = sizeof(peer);
  if (getpeername(fd, (struct sockaddr*)&peer, &length) != 0) die("getpeername on fd %d:", fd);

  static unsigned char buffer[1 << 16];
  unsigned long long total = 0;
  for (;;) {
    ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) die("read:");
    if (got == 0) break;
    if (write_all(fd, buffer, (size_t)got) != 0) die("write:");
    total += (unsigned long long)got;
  }
  if (shutdown(fd, SHUT_WR) != 0) die("shutdown:");
  while (read(fd, buffer, sizeof(buffer)) > 0) {
  }
  close(fd);
  fprintf(stderr, "fd_echo: echoed %llu bytes on inherited fd %d\n", total, fd);
  return 0;
}
