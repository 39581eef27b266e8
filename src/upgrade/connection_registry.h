// Which fds of this process refer to a Connection (a socket qpsock may still
// upgrade, or has). Most processes never have one: the check that data calls
// make first is a single relaxed load.
//
// Lock-free, so that every data call on an upgraded socket pays a few atomic
// operations rather than a lock (which would also have to block signals, or a
// handler doing socket I/O could find it taken), and so that fork and signal
// handlers can never meet it locked.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

#include "stream/function_ref.h"
#include "upgrade/connection.h"

namespace qpsock::upgrade {

// True if any fd of this process may have a Connection.
bool any_connections();
// True once this process has offered an accepted connection (offer_unclaimed):
// from then, an fd without a Connection may hold an offer.
bool any_offers();
// True if any fd of this process may have a Connection or an offer: the
// test of the calls that must see both (close, dup, epoll, passing, fork).
bool any_connections_or_offers();
std::shared_ptr<Connection> find_connection(int fd);

// A hold on fd's Connection for the length of one data call: it keeps the
// Connection alive as a shared_ptr copy would, with one atomic operation
// each way instead of three (the registry's own count, not the shared_ptr's).
class ConnectionHold {
 public:
  ConnectionHold() = default;
  ConnectionHold(ConnectionHold&& other) noexcept
      : holder_(std::exchange(other.holder_, nullptr)), connection_(other.connection_) {}
  ConnectionHold& operator=(ConnectionHold&& other) noexcept {
    std::swap(holder_, other.holder_);
    std::swap(connection_, other.connection_);
    return *this;
  }
  ~ConnectionHold() {
    if (holder_ != nullptr) let_go();
  }
  ConnectionHold(const ConnectionHold&) = delete;
  ConnectionHold& operator=(const ConnectionHold&) = delete;

  explicit operator bool() const { return holder_ != nullptr; }
  bool operator==(std::nullptr_t) const { return holder_ == nullptr; }
  Connection* operator->() const { return connection_; }
  Connection& operator*() const { return *connection_; }
  // A shared_ptr of its own, for what outlives the call.
  std::shared_ptr<Connection> shared() const;

 private:
  friend ConnectionHold hold_connection(int fd);
  friend ConnectionHold claim_offer(int fd, stream::FunctionRef<void(Connection&)> prepare);
  void let_go();
  void* holder_ = nullptr;
  Connection* connection_ = nullptr;
};

// fd's Connection, held, or an empty hold.
ConnectionHold hold_connection(int fd);
// Returns the Connection fd had before (null if none).
std::shared_ptr<Connection> attach_connection(int fd, std::shared_ptr<Connection> connection);
// Removes fd's entry (a Connection, or an offer) and returns its Connection
// (null if none).
std::shared_ptr<Connection> detach_connection(int fd);

// An accepted connection is offered before it has a Connection: fd holds
// an offer, which no lookup returns, until the first process that does I/O
// on it (this one, or a forked child that inherited it) claims it, so that
// a server that leaves its connections to forked children never makes one
// nor writes a page it shares with them. Each offer outstanding has a
// server Connection made ready for it here (this allocates: call it where
// that is safe), so a claim, perhaps in a signal handler, never allocates.
// Returns the Connection fd had before (null if none).
std::shared_ptr<Connection> offer_unclaimed(int fd);
// fd's offer becomes a ready Connection, held, after `prepare` has seen it
// (before any other thread can); a fd without an offer gives what
// hold_connection does. An offer with no Connection ready (memory ran out
// at the offer) gives an empty hold, and stays.
ConnectionHold claim_offer(int fd, stream::FunctionRef<void(Connection&)> prepare);
// dup/dup2/dup3/F_DUPFD: destination now shares source's Connection. Returns
// the Connection destination had before, if another (dup2 over a socket).
std::shared_ptr<Connection> copy_connection(int source, int destination);
// An fd of this process that refers to `connection`: `preferred` if it does,
// else the lowest such fd other than `excluded`; -1 if none.
int attached_fd(const Connection* connection, int preferred, int excluded = -1);
// Whether `connection` is still attached to any fd.
bool connection_in_use(const Connection* connection);
// The highest fd that ever had a Connection (-1: none).
int highest_connection_fd();
// Calls visit(fd, connection) for every fd that has a Connection (exec, which
// resets inherited upgraded sockets). visit must not touch the registry.
void visit_connections(stream::FunctionRef<void(int fd, Connection& connection)> visit);

}  // namespace qpsock::upgrade
