/* Built with _FORTIFY_SOURCE=2: read, recv, recvfrom, poll and ppoll become
 * glibc's __*_chk variants, which qpsock must interpose too. With an argument
 * `overflow`, it asks read for more than the buffer holds and must be stopped
 * by the fortify check, with qpsock as without. */
#define _GNU_SOURCE
#include <poll.h>

#include "probe_common.h"

int main(int argc, char** argv) {
  int client, server;
  probe_connect_pair(&client, &server);
  char buffer[64];
  probe_write_all(client, "0123456789", 10);
  /* Lengths the compiler cannot see, so every call takes its checked variant. */
  volatile size_t three = 3;

  struct pollfd entries[2] = {{server, POLLIN, 0}, {server, POLLIN, 0}};
  volatile nfds_t one = 1;
  PROBE_CHECK(poll(entries, one, 5000) == 1 && (entries[0].revents & POLLIN));
  struct timespec timeout = {5, 0};
  PROBE_CHECK(ppoll(entries, one, &timeout, NULL) == 1);
  PROBE_CHECK(recv(server, buffer, three, 0) == 3 && memcmp(buffer, "012", 3) == 0);
  PROBE_CHECK(recvfrom(server, buffer, three, 0, NULL, NULL) == 3 && memcmp(buffer, "345", 3) == 0);
  size_t count = 4;
  if (argc > 1 && strcmp(argv[1], "overflow") == 0) count = (size_t)argc * 1000;
  PROBE_CHECK(read(server, buffer, count) == 4 && memcmp(buffer, "6789", 4) == 0);
  puts("fortify_probe: ok");
  return 0;
}
