#include "sockets/data_transfer.h"

#include <fcntl.h>
#include <limits.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "libc/next_symbols.h"
#include "libc/own_library_calls.h"
#include "sockets/connection_accounting.h"
#include "upgrade/socket_upgrade.h"

namespace qpsock::sockets {
namespace {

// Once a socket has a Connection (it may switch to a stream, or has), every
// way of moving bytes through it goes through the Connection.
ssize_t receive_through(upgrade::Connection& connection, int fd, void* buffer, size_t count,
                        int flags) {
  iovec piece{buffer, count};
  return connection.receive(fd, {&piece, 1}, flags);
}

ssize_t send_through(upgrade::Connection& connection, int fd, const void* buffer, size_t count,
                     int flags) {
  iovec piece{const_cast<void*>(buffer), count};
  return connection.send(fd, {&piece, 1}, flags);
}

std::span<const iovec> iovecs(const iovec* vector, int count) {
  return {vector, count > 0 ? static_cast<size_t>(count) : 0};
}

size_t total_length(const iovec* vector, int count) {
  size_t total = 0;
  for (int index = 0; index < count; ++index) total += vector[index].iov_len;
  return total;
}

// The kernel refuses more than UIO_MAXIOV (IOV_MAX) pieces: readv and writev
// (and a negative count) with EINVAL, the msghdr calls with EMSGSIZE.
bool vector_count_refused(int count) {
  if (count >= 0 && count <= IOV_MAX) return false;
  errno = EINVAL;
  return true;
}

// As the kernel refuses them: a null header (EFAULT; other bad pointers are
// read as they are given), too many iovecs (EMSGSIZE).
bool message_refused(const msghdr* message) {
  if (message == nullptr) {
    errno = EFAULT;
    return true;
  }
  if (message->msg_iovlen <= IOV_MAX) return false;
  errno = EMSGSIZE;
  return true;
}

bool message_array_refused(const mmsghdr* messages, unsigned int count) {
  if (messages != nullptr || count == 0) return false;
  errno = EFAULT;
  return true;
}

// sendfile/splice through a Connection whose sending has switched: copied
// through a bounded buffer into the stream.
constexpr size_t kCopyChunk = 64 << 10;
// Before the switch the kernel's own call moves the bytes (zero-copy), at
// most this many at a time: the switch waits for a TCP write in flight to
// end, and a blocking sendfile of a whole large file would keep it on TCP.
constexpr size_t kKernelSendLimit = 1 << 20;

ssize_t copy_into_connection(upgrade::Connection& connection, int out_fd, int in_fd,
                             off64_t* offset, size_t count) {
  std::vector<char> buffer(std::min(count, kCopyChunk));
  const ssize_t got = offset != nullptr ? ::pread64(in_fd, buffer.data(), buffer.size(), *offset)
                                        : next::read(in_fd, buffer.data(), buffer.size());
  if (got <= 0) return got;
  const ssize_t sent = send_through(connection, out_fd, buffer.data(), static_cast<size_t>(got), 0);
  if (sent <= 0) return sent;
  if (offset != nullptr) {
    *offset += sent;
  } else if (sent < got) {
    // Give back what was read but not sent (a regular file: seek back).
    ::lseek64(in_fd, sent - got, SEEK_CUR);
  }
  return sent;
}

// sendfile, sendfile64 and splice into a connection: `kernel_send(most)`,
// the kernel's own call for at most `most` bytes, while the sending
// direction is on TCP; once it has switched, the bytes are copied into the
// stream from `in_fd` (at `*offset`, advanced, or at its file position).
template <typename Offset, typename KernelSend>
ssize_t send_file_into(upgrade::Connection& connection, int out_fd, int in_fd, Offset* offset,
                       size_t count, KernelSend kernel_send) {
  if (const auto sent = connection.send_by_kernel(
          out_fd, [&] { return kernel_send(std::min(count, kKernelSendLimit)); }))
    return *sent;
  off64_t position = offset != nullptr ? *offset : 0;
  const ssize_t sent =
      copy_into_connection(connection, out_fd, in_fd, offset != nullptr ? &position : nullptr, count);
  if (offset != nullptr) *offset = static_cast<Offset>(position);
  return sent;
}

}  // namespace

// read and readv of nothing return 0 at once on a socket, whatever is queued
// (sock_read_iter); recv of nothing is the protocol's to answer.
ssize_t read(int fd, void* buffer, size_t count) {
  if (libc::inside_own_library_call) [[unlikely]] return next::read(fd, buffer, count);
  if (count > 0) {
    if (auto connection = upgrade::connection_for_io(fd))
      return receive_through(*connection, fd, buffer, count, 0);
  }
  return count_received(fd, next::read(fd, buffer, count));
}

ssize_t readv(int fd, const iovec* vector, int count) {
  if (auto connection = upgrade::connection_for_io(fd)) {
    if (vector_count_refused(count)) return -1;
    if (total_length(vector, count) > 0) return connection->receive(fd, iovecs(vector, count), 0);
  }
  return count_received(fd, next::readv(fd, vector, count));
}

ssize_t write(int fd, const void* buffer, size_t count) {
  if (libc::inside_own_library_call) [[unlikely]] return next::write(fd, buffer, count);
  if (auto connection = upgrade::connection_for_io(fd))
    return send_through(*connection, fd, buffer, count, 0);
  return count_sent(fd, next::write(fd, buffer, count));
}

ssize_t writev(int fd, const iovec* vector, int count) {
  if (auto connection = upgrade::connection_for_io(fd)) {
    if (vector_count_refused(count)) return -1;
    return connection->send(fd, iovecs(vector, count), 0);
  }
  return count_sent(fd, next::writev(fd, vector, count));
}

ssize_t send(int fd, const void* buffer, size_t count, int flags) {
  if (auto connection = upgrade::connection_for_io(fd))
    return send_through(*connection, fd, buffer, count, flags);
  return count_sent(fd, next::send(fd, buffer, count, flags));
}

ssize_t sendto(int fd, const void* buffer, size_t count, int flags, const sockaddr* address,
               socklen_t length) {
  // A connected TCP socket ignores the address, as the kernel does.
  if (auto connection = upgrade::connection_for_io(fd))
    return send_through(*connection, fd, buffer, count, flags);
  return count_sent(fd, next::sendto(fd, buffer, count, flags, address, length));
}

ssize_t sendmsg(int fd, const msghdr* message, int flags) {
  if (auto connection = upgrade::connection_for_io(fd)) {
    if (message_refused(message)) return -1;
    return connection->send(fd, {message->msg_iov, message->msg_iovlen}, flags);
  }
  // A null message is the kernel's to refuse (EFAULT).
  if (message != nullptr) upgrade::connections_before_passing(fd, *message, flags);
  return count_sent(fd, next::sendmsg(fd, message, flags));
}

int sendmmsg(int fd, mmsghdr* messages, unsigned int count, int flags) {
  if (auto connection = upgrade::connection_for_io(fd)) {
    // As __sys_sendmmsg: an error ends the batch (reported only if nothing was
    // sent), and so does a message sent in part.
    if (message_array_refused(messages, count)) return -1;
    const int saved_errno = errno;
    count = std::min<unsigned int>(count, UIO_MAXIOV);
    unsigned int done = 0;
    while (done < count) {
      const msghdr& message = messages[done].msg_hdr;
      const ssize_t sent = message_refused(&message)
                               ? -1
                               : connection->send(fd, {message.msg_iov, message.msg_iovlen}, flags);
      if (sent < 0) {
        if (done == 0) return -1;
        break;
      }
      messages[done++].msg_len = static_cast<unsigned int>(sent);
      size_t wanted = 0;
      for (size_t piece = 0; piece < message.msg_iovlen; ++piece) wanted += message.msg_iov[piece].iov_len;
      if (static_cast<size_t>(sent) < wanted) break;
    }
    errno = saved_errno;
    return static_cast<int>(done);
  }
  // The kernel sends at most UIO_MAXIOV of them.
  const unsigned int sent_at_most =
      messages != nullptr ? std::min<unsigned int>(count, UIO_MAXIOV) : 0;
  for (unsigned int index = 0; index < sent_at_most; ++index)
    upgrade::connections_before_passing(fd, messages[index].msg_hdr, flags);
  return count_messages(fd, next::sendmmsg(fd, messages, count, flags), messages,
                        stats::Direction::sent, flags);
}

ssize_t recv(int fd, void* buffer, size_t count, int flags) {
  if (auto connection = upgrade::connection_for_io(fd))
    return receive_through(*connection, fd, buffer, count, flags);
  return count_received(fd, next::recv(fd, buffer, count, flags), flags);
}

ssize_t recvfrom(int fd, void* buffer, size_t count, int flags, sockaddr* address,
                 socklen_t* length) {
  if (auto connection = upgrade::connection_for_io(fd)) {
    // TCP leaves the address alone (a connected stream has no sender address).
    if (length != nullptr) *length = 0;
    return receive_through(*connection, fd, buffer, count, flags);
  }
  return count_received(fd, next::recvfrom(fd, buffer, count, flags, address, length), flags);
}

ssize_t recvmsg(int fd, msghdr* message, int flags) {
  if (auto connection = upgrade::connection_for_io(fd)) {
    if (message_refused(message)) return -1;
    const ssize_t got = connection->receive(fd, {message->msg_iov, message->msg_iovlen}, flags);
    if (got >= 0) {
      message->msg_namelen = 0;
      message->msg_controllen = 0;
      message->msg_flags = 0;
    }
    return got;
  }
  return count_received(fd, next::recvmsg(fd, message, flags), flags);
}

int recvmmsg(int fd, mmsghdr* messages, unsigned int count, int flags, timespec* timeout) {
  if (auto connection = upgrade::connection_for_io(fd)) {
    // As do_recvmmsg: each message is one recvmsg; MSG_WAITFORONE (only it)
    // makes those after the first non-blocking; the end of the stream is a
    // message of 0 bytes and the batch goes on; the timeout is looked at
    // between messages, and what is left of it written back.
    timespec deadline{};
    if (timeout != nullptr) {
      if (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1000000000L) {
        errno = EINVAL;
        return -1;
      }
      clock_gettime(CLOCK_MONOTONIC, &deadline);
      deadline.tv_sec += timeout->tv_sec;
      deadline.tv_nsec += timeout->tv_nsec;
      if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec += 1;
        deadline.tv_nsec -= 1000000000L;
      }
    }
    if (message_array_refused(messages, count)) return -1;
    const int saved_errno = errno;
    int each_flags = flags & ~MSG_WAITFORONE;
    unsigned int done = 0;
    while (done < count) {
      msghdr& message = messages[done].msg_hdr;
      const ssize_t got = message_refused(&message)
                              ? -1
                              : connection->receive(fd, {message.msg_iov, message.msg_iovlen}, each_flags);
      if (got < 0) {
        if (done == 0) return -1;
        break;
      }
      message.msg_namelen = 0;
      message.msg_controllen = 0;
      message.msg_flags = 0;
      messages[done++].msg_len = static_cast<unsigned int>(got);
      if ((flags & MSG_WAITFORONE) != 0) each_flags |= MSG_DONTWAIT;
      if (timeout != nullptr) {
        timespec now{};
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long left_ns = (static_cast<long long>(deadline.tv_sec) - now.tv_sec) * 1000000000LL +
                            (deadline.tv_nsec - now.tv_nsec);
        if (left_ns < 0) left_ns = 0;
        timeout->tv_sec = static_cast<time_t>(left_ns / 1000000000LL);
        timeout->tv_nsec = static_cast<long>(left_ns % 1000000000LL);
        if (left_ns == 0) break;
      }
    }
    errno = saved_errno;
    return static_cast<int>(done);
  }
  return count_messages(fd, next::recvmmsg(fd, messages, count, flags, timeout), messages,
                        stats::Direction::received, flags);
}

ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) {
  if (auto connection = upgrade::connection_for_io(out_fd))
    return send_file_into(*connection, out_fd, in_fd, offset, count, [&](size_t most) {
      return next::sendfile(out_fd, in_fd, offset, most);
    });
  return count_sent(out_fd, next::sendfile(out_fd, in_fd, offset, count));
}

ssize_t sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count) {
  if (auto connection = upgrade::connection_for_io(out_fd))
    return send_file_into(*connection, out_fd, in_fd, offset, count, [&](size_t most) {
      return next::sendfile64(out_fd, in_fd, offset, most);
    });
  return count_sent(out_fd, next::sendfile64(out_fd, in_fd, offset, count));
}

ssize_t splice(int in_fd, loff_t* in_offset, int out_fd, loff_t* out_offset, size_t count,
               unsigned int flags) {
  if (auto connection = upgrade::connection_for_io(out_fd))
    return send_file_into(*connection, out_fd, in_fd, in_offset, count, [&](size_t most) {
      return next::splice(in_fd, in_offset, out_fd, out_offset, most, flags);
    });
  if (auto connection = upgrade::connection_for_io(in_fd)) {
    std::vector<char> buffer(std::min(count, kCopyChunk));
    // Never take more than the pipe can hold at once, so nothing read is lost.
    const ssize_t got = receive_through(*connection, in_fd, buffer.data(), buffer.size(),
                                        (flags & SPLICE_F_NONBLOCK) ? MSG_DONTWAIT : 0);
    if (got <= 0) return got;
    size_t written = 0;
    while (written < static_cast<size_t>(got)) {
      const ssize_t put = out_offset != nullptr
                              ? ::pwrite64(out_fd, buffer.data() + written, got - written, *out_offset)
                              : next::write(out_fd, buffer.data() + written, got - written);
      if (put < 0 && errno == EINTR) continue;
      if (put <= 0) return written > 0 ? static_cast<ssize_t>(written) : -1;
      written += static_cast<size_t>(put);
      if (out_offset != nullptr) *out_offset += put;
    }
    return got;
  }
  // One end is a pipe (its handle is 0): the bytes leave or enter the socket end.
  const ssize_t moved = next::splice(in_fd, in_offset, out_fd, out_offset, count, flags);
  count_received(in_fd, moved);
  return count_sent(out_fd, moved);
}

}  // namespace qpsock::sockets
