// The sender's side of zero-copy writes: a large contiguous piece of a blocking
// send is registered and described in a rendezvous record. With
// RendezvousMethod::read the receiver pulls it with RDMA reads and answers
// rendezvous_done. With RendezvousMethod::write it asks for it piece by
// piece, in order, and the sender writes each piece into the receiver's
// buffer; once every byte is asked for and every write has completed, the
// bytes are the receiver's, and no answer is needed. The sending thread
// returns only then, so its buffer is untouched until the bytes left.
//
// If the sending thread is interrupted by a signal while it waits, it asks the
// receiver to cancel: the receiver declines a rendezvous it has not started
// (the send then returns what it had sent before, or EINTR), and otherwise
// finishes it (rendezvous_done, or the last write of a rendezvous by write).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "stream/record.h"
#include "stream/registration_provider.h"

namespace qpsock::stream {

enum class RendezvousOutcome : uint8_t { pending, done, declined };

// Guarded by the stream's state lock.
class RendezvousSender {
 public:
  // Starts tracking a rendezvous of `length` bytes at `source`, registered by
  // `lease`; returns its descriptor (with a fresh id).
  RendezvousDescriptor start(const void* source, uint64_t length, const RegistrationLease& lease);
  // The receiver's answer; false for an id not pending (a protocol error).
  bool on_answer(uint32_t id, RendezvousOutcome outcome);
  RendezvousOutcome outcome(uint32_t id) const;
  // Answered, and none of our writes of it still reads its buffer: the
  // sending thread may give the buffer back.
  bool settled(uint32_t id) const;
  // RendezvousMethod::write: the receiver has asked for some of it, so it
  // takes it whole unless the stream breaks (a cancel would be ignored).
  bool begun(uint32_t id) const;
  // RendezvousMethod::write: the receiver asks for `length` bytes from
  // `offset` of rendezvous `id`. The slice to write them from (counted as a
  // write in flight until on_write_completed), or nothing if the request
  // names no pending rendezvous, bytes beyond it, or does not follow the
  // bytes asked for before (a protocol error).
  std::optional<LocalSlice> accept_write_request(uint32_t id, uint64_t offset, uint64_t length);
  // One of our writes of `id` completed; the last one of a rendezvous asked
  // for in full makes it done, if every write succeeded.
  void on_write_completed(uint32_t id, bool succeeded);
  // Stops tracking `id` (its sender has returned).
  void finish(uint32_t id);
  // Bytes of started rendezvous not yet answered (part of SIOCOUTQ).
  uint64_t bytes_in_flight() const;

 private:
  struct Entry {
    uint32_t id;
    std::byte* source;
    uint64_t length;
    const MemoryRegistration* registration;  // the sending thread's lease holds it
    RendezvousOutcome outcome = RendezvousOutcome::pending;
    uint32_t writes_in_flight = 0;
    uint64_t requested = 0;  // RendezvousMethod::write: bytes asked for so far
    bool write_failed = false;
  };
  Entry* find(uint32_t id);
  const Entry* find(uint32_t id) const;

  std::vector<Entry> entries_;  // one per sending thread in a rendezvous: tiny
  uint32_t next_id_ = 1;
};

}  // namespace qpsock::stream
