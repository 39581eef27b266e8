// A real TCP connection over loopback (127.0.0.1, a port the kernel picks),
// for tests of what a kernel socket does: the connecting end and the end
// the listener accepted.
#pragma once

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace qpsock::testing {

// Call as ASSERT_NO_FATAL_FAILURE(connect_over_loopback(connecting, accepted)).
inline void connect_over_loopback(int& connecting, int& accepted) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  connecting = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(connecting, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  accepted = accept(listener, nullptr, nullptr);
  close(listener);
  ASSERT_GE(accepted, 0);
}

}  // namespace qpsock::testing
