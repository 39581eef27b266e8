// Lingering closes: a closed socket's held bytes go on to the peer, then its
// end of stream and FIN, from the timer thread (tcp_close's orphan socket).
#include "upgrade/lingering_close.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/sockios.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <vector>

#include "common/kept_fd.h"
#include "common/log.h"
#include "common/own_descriptor.h"
#include "libc/next_symbols.h"
#include "stream/control_doorbell.h"
#include "upgrade/connection.h"
#include "upgrade/connection_reset.h"
#include "upgrade/connection_timers.h"

namespace qpsock::upgrade {
namespace {

using Clock = std::chrono::steady_clock;

struct Lingering {
  std::shared_ptr<Connection> connection;
  int copy;                  // our duplicate of the socket
  uint64_t held;             // bytes held (draining: in TCP's send queue) at the last step
  Clock::time_point give_up; // kLingerPatience after the last progress
  // The stream has ended and the FIN is queued: the copy stays open while
  // TCP's send queue drains.
  bool draining;
};

constexpr std::chrono::milliseconds kDrainStep{10};

// Bytes in the socket's TCP send queue (not yet sent, or not acknowledged).
uint64_t kernel_unsent(int fd) {
  int bytes = 0;
  return next::ioctl(fd, SIOCOUTQ, &bytes) == 0 && bytes > 0 ? static_cast<uint64_t>(bytes) : 0;
}

std::mutex lingering_mutex;
std::atomic<uint32_t> lingering_count{0};  // the list's size
std::vector<Lingering>& lingering() {
  static auto* list = new std::vector<Lingering>();  // never destroyed: exit handlers use it
  return *list;
}

void close_copy(int copy, bool reset) {
  if (reset) reset_when_closed(copy);
  // The stream keeps the number (its control channel): fence it first.
  fence_fd_close(copy);
  close_descriptor(copy);
}

// With lingering_mutex held: `connection`'s entry, or null.
Lingering* find_entry(const Connection* connection) {
  auto& list = lingering();
  const auto it = std::find_if(list.begin(), list.end(),
                               [&](const Lingering& entry) { return entry.connection.get() == connection; });
  return it == list.end() ? nullptr : &*it;
}

// Ends `connection`'s lingering: closes (or resets) its duplicate and
// forgets it. The entry stays listed while a step runs, so that the
// process's exit sees every lingering stream.
void finish(const Connection* connection, bool reset) {
  std::lock_guard lock(lingering_mutex);
  Lingering* entry = find_entry(connection);
  if (entry == nullptr) return;
  close_copy(entry->copy, reset);
  lingering().erase(lingering().begin() + (entry - lingering().data()));
  lingering_count.fetch_sub(1, std::memory_order_release);
}

// With lingering_mutex held.
void add_entry(Lingering entry) {
  lingering().push_back(std::move(entry));
  lingering_count.fetch_add(1, std::memory_order_release);
}

}  // namespace

bool any_lingering() { return lingering_count.load(std::memory_order_acquire) != 0; }

bool linger_after_close(const std::shared_ptr<Connection>& connection, int fd) {
  stream::Stream* stream = connection->stream();
  if (stream == nullptr) return false;
  const uint64_t held = stream->send_backlog_bytes();
  // Unread data: TCP resets, and sends nothing more (close_stream does that).
  if (held == 0 || stream->readable_bytes() > 0) return false;
  // Not below fd: the numbers the application gets next stay as they were.
  const int copy = keep_own_descriptor(next::fcntl(fd, F_DUPFD_CLOEXEC, fd));
  if (copy < 0) return false;  // no descriptor to spare: close waits, as before
  // Its end of stream follows the held bytes; the FIN waits for the copy's close.
  stream->shutdown_write();
  stream->move_control_channel(keep_fd(copy));
  {
    std::lock_guard lock(lingering_mutex);
    add_entry({connection, copy, held, Clock::now() + kLingerPatience, false});
  }
  QPSOCK_LOG(debug, "fd %d: closed with %llu written bytes held: they go on to the peer, then the "
             "end of stream and the FIN", fd, static_cast<unsigned long long>(held));
  run_later(ConnectionTimer::linger, connection, std::chrono::milliseconds(0));
  return true;
}

namespace {

// A draining step: closes the copy once TCP's send queue is empty (a reset
// costs nothing then), the peer reset, or it took nothing for kLingerPatience.
void continue_draining(const std::shared_ptr<Connection>& connection, int copy) {
  // Only this thread closes the copy (finish): the number is ours.
  bool done = stream::take_doorbells(keep_fd(copy)) == stream::ControlState::gone;
  const uint64_t unsent = kernel_unsent(copy);
  done = done || unsent == 0;
  {
    std::lock_guard lock(lingering_mutex);
    Lingering* entry = find_entry(connection.get());
    if (entry == nullptr) return;
    const auto now = Clock::now();
    if (unsent < entry->held) entry->give_up = now + kLingerPatience;
    entry->held = unsent;
    done = done || now >= entry->give_up;
  }
  if (done) {
    finish(connection.get(), false);
    return;
  }
  run_later(ConnectionTimer::linger, connection, kDrainStep);
}

// The stream has ended: its FIN now, behind what TCP's send queue still
// holds, and the copy stays open while that drains. The peer may still
// ring (for the credit it returns while we held bytes), and a doorbell
// reaching a closed socket makes its kernel answer with a reset, which
// throws away the send queue: bytes the application wrote over TCP before
// the switch, which the peer has not read yet.
void drain_after_end(const std::shared_ptr<Connection>& connection, int copy) {
  next::shutdown(copy, SHUT_WR);
  {
    std::lock_guard lock(lingering_mutex);
    Lingering* entry = find_entry(connection.get());
    if (entry == nullptr) return;
    entry->draining = true;
    entry->held = kernel_unsent(copy);
    entry->give_up = Clock::now() + kLingerPatience;
  }
  continue_draining(connection, copy);
}

}  // namespace

void continue_lingering(const std::shared_ptr<Connection>& connection) {
  stream::Stream* stream = connection->stream();
  int copy = -1;
  bool draining = false;
  {
    std::lock_guard lock(lingering_mutex);
    const Lingering* entry = find_entry(connection.get());
    if (entry == nullptr) return;
    copy = entry->copy;
    draining = entry->draining;
  }
  if (draining) {
    continue_draining(connection, copy);
    return;
  }
  if (stream == nullptr) {
    finish(connection.get(), true);
    return;
  }
  const auto again = stream->ask_peer_for_room();  // pushes what the peer has room for
  const uint64_t held = stream->send_backlog_bytes();
  if (held == 0) {
    connection->take_own_bytes_before_close(copy);
    const stream::CloseResult closed = stream->close();
    if (closed.lost_bytes > 0 || closed.unread_bytes > 0)
      finish(connection.get(), true);
    else
      drain_after_end(connection, copy);
    return;
  }
  const auto now = Clock::now();
  bool given_up = stream->broken();
  {
    std::lock_guard lock(lingering_mutex);
    Lingering* entry = find_entry(connection.get());
    if (entry == nullptr) return;
    if (held < entry->held) entry->give_up = now + kLingerPatience;
    entry->held = held;
    given_up = given_up || now >= entry->give_up;
  }
  if (given_up) {
    QPSOCK_LOG(warn, "a closed connection's last %llu written bytes could not go (%s): resetting "
               "it, so the peer sees a reset, not an end after a part",
               static_cast<unsigned long long>(held),
               stream->broken() ? "the connection broke" : "the peer gave no room for a minute");
    stream->abort();
    finish(connection.get(), true);
    return;
  }
  run_later(ConnectionTimer::linger, connection, again.value_or(stream->room_patience()));
}

void drain_after_close(const std::shared_ptr<Connection>& connection, int fd) {
  // Never upgraded: no doorbell can come.
  if (connection->stream() == nullptr) return;
  const uint64_t unsent = kernel_unsent(fd);
  if (unsent == 0) return;  // a reset the peer's late doorbell makes costs nothing
  const int copy = keep_own_descriptor(next::fcntl(fd, F_DUPFD_CLOEXEC, fd));
  if (copy < 0) return;  // no descriptor to spare: closed now, as before
  // No shutdown: the socket may be another process's too (a forked child's),
  // and the FIN the copy's close sends follows the queue's bytes, as the
  // kernel's would have.
  {
    std::lock_guard lock(lingering_mutex);
    add_entry({connection, copy, unsent, Clock::now() + kLingerPatience, true});
  }
  QPSOCK_LOG(debug, "fd %d: closed with %llu bytes in TCP's send queue: the socket stays open, its "
             "doorbells read, until they went", fd, static_cast<unsigned long long>(unsent));
  run_later(ConnectionTimer::linger, connection, kDrainStep);
}

void lingering_before_exit(std::chrono::steady_clock::time_point deadline,
                           stream::Stream::ExitCall call) {
  auto deliver = [&](const Lingering& entry) {
    if (entry.draining) return;  // ended in order: the FIN is queued
    stream::Stream* stream = entry.connection->stream();
    if (stream == nullptr || stream->deliver_before_exit(deadline, call)) return;
    // Not under _exit, perhaps in a signal handler (as connections_before_exit).
    if (call == stream::Stream::ExitCall::exit)
      QPSOCK_LOG(warn, "the process ends with written bytes of a closed connection that its peer "
                 "did not take: resetting it, so the peer sees a reset, not an end after a part");
    reset_when_closed(entry.copy);
  };
  if (call == stream::Stream::ExitCall::exit) {
    // Delivered outside the lock: the timer's steps go on meanwhile.
    std::vector<Lingering> entries;
    {
      std::lock_guard lock(lingering_mutex);
      entries = lingering();
    }
    for (const Lingering& entry : entries) {
      deliver(entry);
      // The exit closes the copy: a doorbell left unread in it would make
      // that close a reset, which throws away TCP's send queue.
      entry.connection->take_own_bytes_before_close(entry.copy);
    }
    return;
  }
  // _exit, perhaps in a signal handler that interrupted a moment under the
  // lock: only tried, and nothing allocated.
  std::unique_lock lock(lingering_mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;
  for (const Lingering& entry : lingering()) {
    deliver(entry);
    entry.connection->take_doorbells_before_exit(entry.copy);
  }
}

void lingering_after_fork_in_child() {
  // A thread of the parent's may have held it at the fork: then the child
  // keeps its copies (the parent's FIN waits for the child's end).
  std::unique_lock lock(lingering_mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;
  for (Lingering& entry : lingering()) {
    entry.connection->abandon_inherited_stream();
    fence_fd_close(entry.copy);
    close_descriptor(entry.copy);
  }
  lingering().clear();
  lingering_count.store(0, std::memory_order_release);
}

}  // namespace qpsock::upgrade
