// A TCP connection on loopback whose two Connections have streams (over the
// loopback transport) installed as the handshake installs them, so that each
// direction switches mid-stream at its first write: upgraded connections in
// one process, for tests of what runs around them.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <memory>

#include "common/kept_fd.h"
#include "common/unique_fd.h"
#include "stream/loopback_stream_pair.h"
#include "upgrade/connection.h"

namespace qpsock::testing {

struct UpgradedPair {
  UniqueFd client_fd;
  UniqueFd server_fd;
  std::shared_ptr<upgrade::Connection> client;
  std::shared_ptr<upgrade::Connection> server;
};

// A connected, non-blocking TCP pair on 127.0.0.1 with streams installed on
// both Connections and both send switches allowed.
inline void make_upgraded_pair(UpgradedPair& pair) {
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM, 0));
  ASSERT_TRUE(listener.valid());
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(listener.get(), 1), 0);
  ASSERT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
  pair.client_fd = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
  ASSERT_TRUE(pair.client_fd.valid());
  const int connected = ::connect(pair.client_fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address));
  ASSERT_TRUE(connected == 0 || errno == EINPROGRESS);
  pair.server_fd = UniqueFd(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK));
  ASSERT_TRUE(pair.server_fd.valid());

  stream::LoopbackStreamPair streams;
  ASSERT_EQ(stream::make_loopback_stream_pair({}, {}, {}, streams), 0);
  pair.client = std::make_shared<upgrade::Connection>(config::Role::client);
  pair.server = std::make_shared<upgrade::Connection>(config::Role::server);
  ASSERT_TRUE(pair.client->begin_negotiation());
  ASSERT_TRUE(pair.server->begin_negotiation());
  pair.client->install(std::move(streams.first), pair.server->expected_token(), keep_fd(pair.client_fd.get()),
                       stats::Path::shm);
  pair.server->install(std::move(streams.second), pair.client->expected_token(), keep_fd(pair.server_fd.get()),
                       stats::Path::shm);
  pair.client->allow_send_switch();
  pair.server->allow_send_switch();
}

}  // namespace qpsock::testing
