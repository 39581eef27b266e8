#include "upgrade/stream_settings_for_socket.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>

#include "common/small_file.h"
#include "config/config_loader.h"
#include "libc/next_symbols.h"
#include "sockets/fd_table.h"

namespace qpsock::upgrade {
namespace {

// Field `index` (0, 1 or 2) of one of TCP's three-number sysctls
// (/proc/sys/net/ipv4/NAME); 0 if it cannot be read.
uint64_t tcp_sysctl_field(const char* name, int index) {
  char path[64], text[128];
  unsigned long long fields[3] = {};
  std::snprintf(path, sizeof(path), "/proc/sys/net/ipv4/%s", name);
  if (read_small_file(path, text, sizeof(text)) <= 0 ||
      std::sscanf(text, "%llu %llu %llu", &fields[0], &fields[1], &fields[2]) != 3)
    return 0;
  return fields[index];
}

// The most a TCP send buffer grows to by itself (tcp_wmem's third field),
// read once; Linux's default if it cannot be read.
uint64_t largest_tcp_send_buffer() {
  static const uint64_t largest = [] {
    const uint64_t most = tcp_sysctl_field("tcp_wmem", 2);
    return most > 0 ? most : uint64_t{4} << 20;
  }();
  return largest;
}

// What all of a process's backlogs may hold: where the kernel puts
// all of TCP under memory pressure (tcp_mem's second field, in pages), read
// once; 1 GiB if it cannot be read.
uint64_t backlog_process_limit() {
  static const uint64_t limit = [] {
    const uint64_t pressure = tcp_sysctl_field("tcp_mem", 1);
    const long page = sysconf(_SC_PAGESIZE);
    return pressure > 0 && page > 0 ? pressure * static_cast<uint64_t>(page) : uint64_t{1} << 30;
  }();
  return limit;
}

// The room kernel TCP gives a writer whose reader does not read is its send
// buffer and the reader's receive buffer. We hold the peer's bytes for our
// application beyond the ring up to as much: the most the peer's send buffer
// may grow to (we do not know what it set) and our own receive buffer.
uint64_t receive_backlog_limit(int tcp_fd) {
  int receive_buffer = 0;
  socklen_t length = sizeof(receive_buffer);
  if (next::getsockopt(tcp_fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, &length) != 0)
    receive_buffer = 0;
  return largest_tcp_send_buffer() + static_cast<uint64_t>(std::max(receive_buffer, 0));
}

// What TCP's send buffer would take before a writer waits: twice what the
// application set with SO_SNDBUF (the kernel doubles it), or the most it
// grows to by itself.
uint64_t send_backlog_limit(uint32_t requested_send_buffer) {
  return requested_send_buffer != 0 ? uint64_t{2} * requested_send_buffer : largest_tcp_send_buffer();
}

}  // namespace

stream::StreamSettings stream_settings_for_socket(int tcp_fd) {
  const config::Tunables& tunables = config::process_config().tunables();
  stream::StreamSettings settings;
  settings.ring_size = tunables.ring_size;
  const sockets::FdTable::BufferSizes requested = sockets::FdTable::process_table().buffer_sizes(tcp_fd);
  if (requested.receive != 0) {
    settings.ring_size = std::clamp(std::bit_ceil(uint64_t{requested.receive}),
                                    config::limits::kSmallestRingSize, config::limits::kLargestRingSize);
  }
  settings.send_window = requested.send;
  settings.eager_chunk = tunables.eager_chunk;
  settings.rendezvous_threshold = tunables.rendezvous_threshold;
  settings.rendezvous_patience = tunables.rendezvous_patience;
  settings.spin_time = tunables.spin_time;
  settings.spin_limit = tunables.spin_limit;
  settings.receive_backlog_limit = receive_backlog_limit(tcp_fd);
  settings.send_backlog_limit = send_backlog_limit(requested.send);
  settings.backlog_process_limit = backlog_process_limit();
  return settings;
}

}  // namespace qpsock::upgrade
