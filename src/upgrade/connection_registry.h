// Which fds of this process refer to a Connection (a socket qpsock may still
// upgrade, or has). Most processes never have one: the check that data calls
// make first is a single relaxed load.
#pragma once

#include <memory>

#include "upgrade/connection.h"

namespace qpsock::upgrade {

// True if any fd of this process may have a Connection.
bool any_connections();
std::shared_ptr<Connection> find_connection(int fd);
void attach_connection(int fd, std::shared_ptr<Connection> connection);
// Removes fd's entry and returns it (null if none).
std::shared_ptr<Connection> detach_connection(int fd);
// dup/dup2/dup3/F_DUPFD: destination now shares source's Connection.
void copy_connection(int source, int destination);
// Whether `connection` is still attached to any fd.
bool connection_in_use(const Connection* connection);
// Calls visit(fd, connection) for every entry, under the registry's lock
// (visit must not block or touch the registry). Skipped, returning false,
// if the lock is taken: exec in a child forked while another thread held it.
bool visit_connections(void (*visit)(int fd, Connection& connection));

}  // namespace qpsock::upgrade
