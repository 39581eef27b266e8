// Stream progress: polling the transport, acting on completions and the
// peer's notifications, and posting our own notifications when the peer has
// slots for them. Everything here runs under the state lock.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "stream/control_doorbell.h"
#include "stream/stream.h"

namespace qpsock::stream {

bool Stream::progress_locked() {
  std::array<Completion, 32> batch;
  bool changed = false;
  for (;;) {
    const int count = transport_->poll(batch);
    if (count < 0) {
      break_connection_locked(ECONNRESET, "polling the transport failed");
      changed = true;
      break;
    }
    for (int index = 0; index < count; ++index) dispatch_locked(batch[index]);
    changed = changed || count > 0;
    if (static_cast<size_t>(count) < batch.size()) break;
  }
  // What waits to be posted waits for a completion (a send-queue entry, a
  // returned slot, a polled notification) or is flushed by whoever queued it:
  // a poll that found nothing has nothing to flush.
  if (changed) {
    flush_notifications_locked();
    notify_waiters_locked();
  }
  return changed;
}

void Stream::dispatch_locked(const Completion& completion) {
  switch (completion.kind) {
    case CompletionKind::write_done:
      if (posts_outstanding_ > 0) --posts_outstanding_;
      if (post_kind(completion.cookie) == PostKind::rendezvous_write)
        rendezvous_out_.on_write_completed(cookie_rendezvous_id(completion.cookie),
                                           completion.status == 0);
      if (post_kind(completion.cookie) == PostKind::ring_write) {
        unsent_payload_ -= std::min<uint64_t>(cookie_payload_bytes(completion.cookie), unsent_payload_);
        if (completion.status == 0)
          send_credit_->on_write_completed(cookie_ring_end(completion.cookie, send_credit_->written()));
      }
      break;
    case CompletionKind::read_done:
      if (posts_outstanding_ > 0) --posts_outstanding_;
      if (pull_pieces_outstanding_ > 0) --pull_pieces_outstanding_;
      if (completion.status != 0) pull_failed_ = true;
      break;
    case CompletionKind::arrived:
      if (completion.status == 0 && !broken_) {
        if (auto notification = decode_notification(completion.immediate))
          on_notification_locked(*notification);
        else
          protocol_error_locked("unknown notification");
      }
      break;
  }
  if (completion.status != 0) break_connection_locked(ECONNRESET, "a transfer failed or was flushed");
}

void Stream::on_notification_locked(const Notification& notification) {
  if (is_counted(notification.kind)) window_->on_counted_polled();
  switch (notification.kind) {
    case NotificationKind::data_arrived:
      notified_ += notification.value * kRingUnit;
      scan_locked();
      break;
    case NotificationKind::credit:
      if (!send_credit_->on_credit(notification.value * kRingUnit))
        protocol_error_locked("credit for bytes never written");
      stalled_since_.reset();
      room_asked_early_ = false;
      room_requested_ = false;
      break;
    case NotificationKind::slots_returned:
      if (!window_->on_slots_returned(notification.value))
        protocol_error_locked("more slots returned than used");
      break;
    case NotificationKind::rendezvous_done:
    case NotificationKind::rendezvous_declined: {
      const auto outcome = notification.kind == NotificationKind::rendezvous_done
                               ? RendezvousOutcome::done
                               : RendezvousOutcome::declined;
      if (!rendezvous_out_.on_answer(notification.value, outcome))
        protocol_error_locked("answer to no pending rendezvous");
      break;
    }
    case NotificationKind::rendezvous_cancel: {
      uint64_t declined_bytes = 0;
      if (rendezvous_in_.on_cancel(notification.value, declined_bytes) == CancelAnswer::declined) {
        readable_bytes_ -= std::min(declined_bytes, readable_bytes_);
        pending_replies_.push_back({NotificationKind::rendezvous_declined, notification.value});
      }
      // Otherwise it was started (or is done): rendezvous_done answers it,
      // or, when we ask for the bytes to be written, the last write does.
      break;
    }
    case NotificationKind::end_of_stream:
      eof_received_ = true;
      eof_offset_ = notified_;
      break;
    case NotificationKind::reader_gone:
      peer_reader_gone_ = true;
      break;
    case NotificationKind::rendezvous_write_request:
      on_write_request_locked(notification.value);
      break;
    case NotificationKind::rendezvous_written:
      on_written_locked(notification.value);
      break;
    case NotificationKind::room_wanted:
      on_room_wanted_locked(notification.value);
      break;
  }
}

void Stream::on_write_request_locked(uint32_t slot) {
  if (!writes_rendezvous() || slot >= kRequestBoxSlots) {
    protocol_error_locked("a rendezvous write request where none may come");
    return;
  }
  // The peer wrote the request into our box before the immediate that
  // brought us here (RC order): it is complete. It is the peer's to write,
  // so it is checked against what we offered before anything is posted.
  RendezvousWriteRequest request;
  std::memcpy(&request, ring_.data() + settings_.ring_size + slot * sizeof(request),
              sizeof(request));
  const std::optional<LocalSlice> source =
      rendezvous_out_.accept_write_request(request.id, request.source_offset, request.length);
  if (!source) {
    protocol_error_locked("a rendezvous write request for bytes we did not offer");
    return;
  }
  rendezvous_writes_.push_back(
      {request.id, slot, *source, RemoteRegion{request.destination_address, request.destination_key}});
}

void Stream::post_rendezvous_writes_locked() {
  while (!rendezvous_writes_.empty() && window_->can_send_counted() && send_queue_has_room_locked(1)) {
    const RendezvousWrite write = rendezvous_writes_.front();
    rendezvous_writes_.pop_front();
    window_->on_counted_sent();
    ++posts_outstanding_;
    const int error = transport_->post_write(
        {&write.source, 1}, write.destination,
        encode_notification({NotificationKind::rendezvous_written, write.slot}),
        rendezvous_write_cookie(write.id));
    if (error < 0) {
      --posts_outstanding_;
      rendezvous_out_.on_write_completed(write.id, false);
      post_failed_locked("a rendezvous write", error);
      return;
    }
  }
}

void Stream::on_written_locked(uint32_t slot) {
  if (!writes_rendezvous() || pull_pieces_outstanding_ == 0 || slot != next_written_slot_) {
    protocol_error_locked("rendezvous bytes written that we did not ask for");
    return;
  }
  next_written_slot_ = (next_written_slot_ + 1) % kRequestBoxSlots;
  --pull_pieces_outstanding_;
}

// Counts the records the peer just announced: readable bytes, rendezvous
// descriptors. Headers are only read here; the receiving thread reads payloads.
void Stream::scan_locked() {
  while (scanned_ < notified_ && !broken_) {
    const RecordView record = read_record(ring_.bytes(), ring_geometry_, scanned_, notified_);
    if (record.status != RecordStatus::complete) {
      protocol_error_locked("bad record");
      return;
    }
    if (record.header.type == RecordType::data) {
      readable_bytes_ += record.header.payload_length;
    } else if (record.header.type == RecordType::rendezvous) {
      RendezvousDescriptor descriptor;
      std::memcpy(&descriptor, record.payload, sizeof(descriptor));
      rendezvous_in_.on_scanned(descriptor, record.offset);
      readable_bytes_ += descriptor.length;
    }
    scanned_ = record.end();
    if (read_shutdown_ && write_shutdown_ && record.header.type != RecordType::padding) {
      // Data after shutdown(SHUT_RDWR) resets the connection, as TCP does
      // (RFC 1122): the sender learns that nobody will read it.
      break_connection_locked(ECONNRESET, "data arrived after shutdown(SHUT_RDWR)");
      return;
    }
  }
}

bool Stream::send_queue_has_room_locked(uint32_t posts) const {
  return posts_outstanding_ + posts <= transport_->send_queue_depth();
}

bool Stream::post_notification_locked(NotificationKind kind, uint32_t value) {
  if (is_counted(kind)) window_->on_counted_sent();
  ++posts_outstanding_;
  const int error = transport_->post_write({}, RemoteRegion{0, 0},
                                           encode_notification({kind, value}),
                                           plain_cookie(PostKind::notification));
  if (error < 0) {
    --posts_outstanding_;
    post_failed_locked("a notification", error);
    return false;
  }
  return true;
}

// Our notifications that wait for a slot or a send-queue entry: slot returns
// first (they are what lets the peer talk at all), then credit, then
// rendezvous answers and cancels, then end-of-stream (after all data).
void Stream::flush_notifications_locked() {
  if (broken_ || !connected_) return;
  if (const uint32_t slots = window_->slots_to_return(); slots > 0 && send_queue_has_room_locked(1)) {
    if (!post_notification_locked(NotificationKind::slots_returned, slots)) return;
    window_->on_slots_return_sent(slots);
  }
  if (!post_credit_locked(receive_credit_.to_return())) return;
  while (!pending_replies_.empty() && window_->can_send_counted() && send_queue_has_room_locked(1)) {
    const Notification reply = pending_replies_.front();
    pending_replies_.pop_front();
    if (!post_notification_locked(reply.kind, reply.value)) return;
  }
  post_rendezvous_writes_locked();
  if (broken_) return;
  if (held_notice_ && window_->can_send_counted() && send_queue_has_room_locked(1)) {
    const uint32_t held = *held_notice_;
    held_notice_.reset();
    if (!post_notification_locked(NotificationKind::room_wanted, held)) return;
    peer_told_held_ = held != 0;
  }
  if (end_of_stream_pending_ && unnotified_ring_bytes_ == 0 && send_backlog_bytes_ == 0 &&
      send_queue_has_room_locked(1)) {
    window_->take_end_of_stream_slot();
    end_of_stream_pending_ = false;
    if (post_notification_locked(NotificationKind::end_of_stream, 0) && end_sent_wanted_) {
      end_sent_wanted_ = false;
      if (end_sent_) end_sent_();
    }
  }
  if (reader_gone_pending_ && !end_of_stream_pending_ && window_->can_send_counted() &&
      send_queue_has_room_locked(1)) {
    reader_gone_pending_ = false;
    post_notification_locked(NotificationKind::reader_gone, 0);
  }
}

void Stream::return_all_credit_locked() {
  if (!broken_ && connected_) post_credit_locked(receive_credit_.unreturned());
}

bool Stream::post_credit_locked(uint64_t ring_bytes) {
  // Once the peer has ended its direction, credit for it is of no use.
  const uint64_t units = std::min<uint64_t>(ring_bytes / kRingUnit, kLargestNotificationValue);
  if (units == 0 || eof_received_ || !window_->can_send_counted() || !send_queue_has_room_locked(1))
    return true;
  if (!post_notification_locked(NotificationKind::credit, static_cast<uint32_t>(units)))
    return false;
  receive_credit_.on_returned(units * kRingUnit);
  // The peer holds bytes for this room and may not call in to see it.
  if (doorbell_on_credit_) ring_for_room_locked();
  return true;
}

// Announces bytes written with MSG_MORE: before any wait, receive or poll.
void Stream::flush_unnotified_locked() {
  if (unnotified_ring_bytes_ == 0 || broken_ || !connected_ || !window_->can_send_counted() ||
      !send_queue_has_room_locked(1))
    return;
  const auto units = static_cast<uint32_t>(unnotified_ring_bytes_ / kRingUnit);
  if (!post_notification_locked(NotificationKind::data_arrived, units)) return;
  unnotified_ring_bytes_ = 0;
  unnotified_payload_ = 0;
}

namespace {

// How long a reset stays provisional, waiting for the FIN of a peer whose
// end left the link (reset_provisional_until_). In the Soft-RoCE VM the FIN
// followed the rdma_cm's disconnect by well under this; a peer's kernel that
// is alive sends it at once.
constexpr std::chrono::milliseconds kPeerFinGrace{500};

}  // namespace

void Stream::break_connection_locked(int pending_error, const char* why) {
  if (broken_) return;
  broken_ = true;
  const char* seen = why;  // what broke the link, whatever it turns out to mean
  if (pending_error == ECONNRESET && !eof_received_ && !closed_) {
    switch (peer_end_locked()) {
      case PeerEnd::orderly:
        // Its kernel closed the socket as TCP does for a process that ends:
        // the bytes it had written, then end of stream.
        eof_received_ = true;
        eof_offset_ = notified_;
        why = "the peer's process ended without closing (end of stream after its data)";
        break;
      case PeerEnd::not_yet_known:
        reset_provisional_until_ = Clock::now() + kPeerFinGrace;
        why = "the peer left the link before its FIN came: a reset unless the FIN follows";
        break;
      case PeerEnd::reset:
        break;
    }
  }
  if (pending_error == ECONNRESET && eof_received_ && !closed_) {
    // The link went after the peer's end of stream: it closed, it did not reset.
    peer_closed_ = true;
    pending_error = 0;
  }
  if (pending_error != 0 && pending_error_ == 0) pending_error_ = pending_error;
  // The peer must lose access to our ring and rendezvous buffers at once.
  transport_->disconnect();
  notify_waiters_locked();
  QPSOCK_LOG(debug, "stream broken: %s (error %d)%s%s", why, pending_error,
             seen == why ? "" : "; seen: ", seen == why ? "" : seen);
}

ControlState Stream::control_state_locked() {
  if (control_probe_) return control_probe_();
  return read_control_state(control_, DoorbellsPossible::no);
}

Stream::PeerEnd Stream::peer_end_locked() {
  // Anything of ours the peer may not have read, and TCP would reset. (A
  // write of its own it had not finished, a rendezvous we had not taken in
  // full, is no reason: TCP delivers what a dying writer's kernel had
  // accepted, then the FIN; here that is what landed of it, deliver_rendezvous.)
  // After our own shutdown(SHUT_RD) the TCP socket reads end of file whatever
  // the peer did.
  const auto reset = [](const char* why) {
    QPSOCK_LOG(debug, "stream: not the peer's orderly end: %s", why);
    return PeerEnd::reset;
  };
  if (!connected_ || control_.empty()) return reset("no control channel");
  if (read_shutdown_) return reset("we shut down reading");
  if (unsent_payload_ != 0) return reset("writes of ours in flight");
  if (rendezvous_out_.bytes_in_flight() != 0) return reset("a rendezvous of ours in flight");
  // TCP's kernel would still send them; here they went with the process.
  if (peer_holds_bytes_) return reset("the peer's process ended holding bytes it had written");
  // Credit comes back in batches (and before a reader sleeps); a transport
  // may know the exact count.
  const std::optional<uint64_t> consumed = transport_->peer_consumed();
  if (!send_credit_->all_consumed() && consumed != send_credit_->written())
    return reset("bytes of ours the peer has not credited back");
  // The control channel is the TCP connection: end of file there (not a
  // reset, not bytes) is the peer's kernel closing it in order, which it
  // does when the process ends. Its leaving the link (the rdma_cm's
  // disconnect, the shared-memory peer's pidfd) may come before the kernel
  // has processed that FIN, and the FIN is then waited for a moment.
  switch (control_state_locked()) {
    case ControlState::end_of_file:
      return PeerEnd::orderly;
    case ControlState::quiet:
      return transport_->peer_left() ? PeerEnd::not_yet_known
                                     : reset("the link failed here and TCP says nothing");
    case ControlState::gone:
      break;
  }
  return reset("TCP says the connection was reset");
}

bool Stream::settle_provisional_reset_locked() {
  if (!reset_provisional_until_) return false;
  const ControlState control = control_state_locked();
  if (control == ControlState::quiet && Clock::now() < *reset_provisional_until_) return true;
  reset_provisional_until_.reset();
  if (control == ControlState::end_of_file) {
    eof_received_ = true;
    eof_offset_ = notified_;
    peer_closed_ = true;
    if (pending_error_ == ECONNRESET) pending_error_ = 0;
    QPSOCK_LOG(debug, "stream: the peer's FIN followed its leaving the link: its process ended "
                      "(end of stream after its data)");
  }
  notify_waiters_locked();
  return false;
}

void Stream::post_failed_locked(const char* what, int error) {
  if (broken_) return;
  QPSOCK_LOG(warn, "stream: posting %s failed: %s; resetting the connection", what,
             std::strerror(-error));
  break_connection_locked(ECONNRESET, "a post failed");
}

void Stream::protocol_error_locked(const char* what) {
  if (broken_) return;
  QPSOCK_LOG(warn, "stream protocol error: %s; resetting the connection", what);
  break_connection_locked(ECONNRESET, what);
}

}  // namespace qpsock::stream
