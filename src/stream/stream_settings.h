// The stream engine's knobs, as plain values: the config subsystem (or a test)
// fills them in.
#pragma once

#include <chrono>
#include <cstdint>

namespace qpsock::stream {

inline constexpr uint64_t kNoRendezvous = UINT64_MAX;

// How the bytes of a rendezvous move. Both ends of a stream must use the same.
enum class RendezvousMethod : uint8_t {
  // The receiver pulls them with one-sided reads of the sender's buffer
  // (shm: process_vm_readv).
  read,
  // The receiver asks, the sender writes them with one-sided writes into the
  // receiver's buffer (RDMA WRITE WITH IMM): no read is ever retransmitted
  // (Soft-RoCE can fail a queue pair then), and the number of reads a queue
  // pair may have outstanding (often 8 or 16) does not bound the pipeline.
  // Each ring is followed by a request box (ring_layout.h).
  write,
};

struct StreamSettings {
  // Our receive ring (the peer's eager writes land here); a power of two.
  uint64_t ring_size = uint64_t{1} << 20;
  // At most this many bytes written and not yet consumed by the peer (the
  // socket's SO_SNDBUF); 0: as many as the peer's ring holds.
  uint64_t send_window = 0;
  // Largest payload of one data record (also capped at a quarter of the peer's ring).
  uint64_t eager_chunk = uint64_t{64} << 10;
  // A blocking send moves a contiguous piece of at least this many bytes by
  // rendezvous (zero-copy); smaller ones, and non-blocking sends, are copied.
  // kNoRendezvous: every write is copied.
  uint64_t rendezvous_threshold = uint64_t{64} << 10;
  RendezvousMethod rendezvous_method = RendezvousMethod::read;
  // How long a rendezvous waits for the peer to take it before the sender
  // withdraws it (if the peer took nothing) and copies the bytes instead, as
  // TCP would have buffered them for a peer that is not reading.
  std::chrono::microseconds rendezvous_patience{10000};
  // How many bytes of the peer's the receive backlog may hold beyond our
  // ring, for an application that does not read (Stream::answer_peer); 0:
  // none, the ring is all the room the peer gets.
  uint64_t receive_backlog_limit = 0;
  // How many bytes of our application's the send backlog may hold beyond
  // the peer's ring, taken at once as TCP's send buffer takes them (the
  // socket's send buffer size); 0: none, a writer waits for the peer's ring.
  uint64_t send_backlog_limit = 0;
  // All the process's backlogs, both kinds, together hold at most this many.
  uint64_t backlog_process_limit = UINT64_MAX;
  // How long a writer waits for credit before it asks the peer for room.
  std::chrono::microseconds room_patience{10000};
  // How long a blocking wait busy-polls before it sleeps in poll(2), at least.
  std::chrono::microseconds spin_time{20};
  // At most how long, when the connection's recent waits were answered
  // within this long (SpinBudget); spin_time or less: never longer.
  std::chrono::microseconds spin_limit{1000};
  // A read of at least this many bytes of a rendezvous lands straight in the
  // application's buffer; smaller reads go through the bounce buffer.
  uint64_t direct_pull_minimum = uint64_t{16} << 10;
  // How much a small read pulls into the bounce buffer at once.
  uint64_t bounce_size = uint64_t{64} << 10;
  // How long close() waits for its last writes to complete.
  std::chrono::milliseconds close_flush_timeout{2000};
};

}  // namespace qpsock::stream
