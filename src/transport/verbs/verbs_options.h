// What one verbs connection asks for. The device may grant less (its limits
// are applied before the queue pair is made) and the peer may accept fewer
// outstanding reads; the transport reports what it actually got.
#pragma once

#include <cstdint>

#include "common/log.h"

namespace qpsock::transport::verbs {

struct VerbsOptions {
  // The receive ring the transport maps and registers at setup, so that its
  // key travels in the connect's private data: pass the
  // StreamSettings::ring_size the Stream is created with (the Stream's
  // map_receive_ring must ask for exactly this).
  uint64_t ring_size = uint64_t{1} << 20;
  // Immediates we hold unpolled: the zero-length receives kept posted.
  uint32_t notification_capacity = 256;
  // Posts awaiting their completion at once (the send queue depth).
  uint32_t send_queue_depth = 256;
  // RDMA reads in flight (initiator depth), and the peer's reads we serve
  // (responder resources); the CM negotiates the lower of the two ends.
  uint32_t max_outstanding_reads = 16;
  // Scatter/gather entries per post (at least stream::kMinimumSlicesPerPost).
  uint32_t max_slices = 16;
  // The most one RDMA read moves (stream::Transport::max_read_length): a
  // larger pull is several reads, pipelined. Short reads keep each response
  // well inside the ACK timeout: Soft-RoCE (kernel 6.1) retries a read whose
  // whole response outlasts it, and 1 MiB reads already did in the VM.
  uint64_t max_read_length = uint64_t{256} << 10;
  // The inline size asked for first; if the device refuses the queue pair,
  // smaller ones are tried (128, 64, 32, then none).
  uint32_t max_inline = 256;
  // The level of the one line a failed connect, listen or accept logs. The
  // upgrade path, where a failure only means "stay on TCP" and it logs its
  // own line, lowers it to debug.
  log::Level failure_log_level = log::Level::warn;
};

// Whether the options can make a transport the engine accepts.
bool options_valid(const VerbsOptions& options);

}  // namespace qpsock::transport::verbs
