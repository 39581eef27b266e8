#include "upgrade/stream_settings_for_socket.h"

#include <algorithm>
#include <bit>

#include "config/config_loader.h"
#include "sockets/fd_table.h"

namespace qpsock::upgrade {

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
  return settings;
}

}  // namespace qpsock::upgrade
