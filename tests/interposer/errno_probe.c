/* Prints errno after each successful socket call, having set it to a marker
 * first: the output must be identical with and without qpsock. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>

#include "probe_common.h"

#define REPORT(call)                                           \
  do {                                                         \
    errno = 7777;                                              \
    long result = (long)(call);                                \
    printf("%-40s ok=%d errno=%d\n", #call, result >= 0, errno); \
  } while (0)

int main(void) {
  int client, server;
  probe_connect_pair(&client, &server);
  char buffer[16];
  int value = 1;
  socklen_t length = sizeof(value);
  struct sockaddr_storage address;
  socklen_t address_length = sizeof(address);
  struct pollfd entry = {server, POLLIN, 0};
  struct epoll_event event = {EPOLLIN, {0}};
  int epoll_fd = epoll_create1(EPOLL_CLOEXEC);

  REPORT(write(client, "abcdef", 6));
  REPORT(poll(&entry, 1, 1000));
  REPORT(epoll_ctl(epoll_fd, EPOLL_CTL_ADD, server, &event));
  REPORT(epoll_wait(epoll_fd, &event, 1, 1000));
  REPORT(read(server, buffer, 2));
  REPORT(recv(server, buffer, 2, MSG_PEEK));
  REPORT(recv(server, buffer, 4, 0));
  REPORT(send(client, "x", 1, MSG_NOSIGNAL));
  REPORT(recv(server, buffer, 1, MSG_DONTWAIT));
  REPORT(setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &value, sizeof(value)));
  REPORT(getsockopt(client, IPPROTO_TCP, TCP_NODELAY, &value, &length));
  REPORT(getsockname(client, (struct sockaddr*)&address, &address_length));
  REPORT(getpeername(client, (struct sockaddr*)&address, &address_length));
  REPORT(fcntl(client, F_GETFL));
  REPORT(fcntl(client, F_SETFL, O_NONBLOCK));
  REPORT(ioctl(server, FIONREAD, &value));
  REPORT(dup2(client, 100));
  REPORT(dup3(client, 101, O_CLOEXEC));
  REPORT(fcntl(client, F_DUPFD_CLOEXEC, 200));
  REPORT(close(100));
  REPORT(shutdown(client, SHUT_WR));
  REPORT(close(client));
  REPORT(close(server));
  return 0;
}
