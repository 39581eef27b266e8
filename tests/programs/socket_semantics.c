/* socket_semantics: a conformance probe of TCP socket semantics, one case per
 * run, whose output must not depend on whether the connection is the kernel's
 * TCP or qpsock's upgraded stream (tests/integration/socket_semantics.sh runs
 * every case both ways and compares).
 *
 *   socket_semantics --list          the case names, one a line
 *   socket_semantics CASE [accept|connect]
 *
 * The process (the "subject") listens on 127.0.0.1 port 0 and forks a peer;
 * by default the subject accepts and the peer connects ("connect": the other
 * way round). Both first exchange three 1-byte turns each way (the connecting
 * side speaks first and pauses 20 ms before its later turns), so that under
 * qpsock the upgrade has finished and both directions have switched to the
 * stream before the behaviour under test. Then the case runs: the two sides
 * keep in step through pipes (never through the socket), and each prints one
 * line per observation: results and errno names, byte counts, CRC-32s, poll
 * masks; never an address, a time or a pid. The peer's lines ("peer: ...")
 * come after the subject's, then the peer's exit status.
 *
 * Where the kernel's result depends on timing, the case waits (bounded) for
 * the state it wants to observe, or prints a normalized observation. Every
 * wait is bounded: an alarm of CASE_SECONDS in each process prints TIMEOUT
 * and exits 1. The exit status is 0 when the case ran to its end (whatever it
 * observed), 1 on a timeout or an internal failure. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <linux/sockios.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>

#include "common.h"

#define CASE_SECONDS 10
/* Bounded waits inside a case (well under CASE_SECONDS). */
#define SETTLE_MS 3000

/* ------------------------------------------------------------------ state */

static int peer_side;              /* 1 in the forked peer */
static int report_fd = -1;         /* the peer's lines go here; the subject prints them */
static int report_read_fd = -1;    /* the subject's end of that pipe */
static int control_out = -1;       /* one byte: "your turn" */
static int control_in = -1;
static pid_t peer_pid = -1;        /* in the subject */
static int peer_reaped;            /* the case waited for the peer itself */
static int peer_status;
static int connection_fd = -1;     /* -1 once a case closed it */
static volatile sig_atomic_t sigpipes;
/* Bytes the peer's writes have returned for, shared across the fork. */
static _Atomic unsigned long long* peer_written;

/* ------------------------------------------------------------------ output */

__attribute__((format(printf, 1, 2))) static void say(const char* format, ...) {
  char line[600];
  int prefix = peer_side ? snprintf(line, sizeof(line), "peer: ") : 0;
  va_list arguments;
  va_start(arguments, format);
  int body = vsnprintf(line + prefix, sizeof(line) - (size_t)prefix - 1, format, arguments);
  va_end(arguments);
  if (body < 0) body = 0;
  size_t length = (size_t)prefix + (size_t)body;
  if (length > sizeof(line) - 2) length = sizeof(line) - 2;
  line[length++] = '\n';
  int saved = errno;
  write_all(peer_side ? report_fd : STDOUT_FILENO, line, length);
  errno = saved;
}

static const char* errno_name(int error) {
  switch (error) {
    case 0: return "0";
    case EAGAIN: return "EAGAIN";
    case EPIPE: return "EPIPE";
    case ECONNRESET: return "ECONNRESET";
    case ECONNABORTED: return "ECONNABORTED";
    case ENOTCONN: return "ENOTCONN";
    case ESHUTDOWN: return "ESHUTDOWN";
    case EINVAL: return "EINVAL";
    case EMSGSIZE: return "EMSGSIZE";
    case EINTR: return "EINTR";
    case EBADF: return "EBADF";
    case EFAULT: return "EFAULT";
    case ENOTSOCK: return "ENOTSOCK";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case ETIMEDOUT: return "ETIMEDOUT";
    case ENOBUFS: return "ENOBUFS";
    case ENOMEM: return "ENOMEM";
    case EIO: return "EIO";
    case EPROTO: return "EPROTO";
    default: {
      static char other[8][24];
      static unsigned next;
      char* text = other[next++ % 8];
      snprintf(text, sizeof(other[0]), "errno%d", error);
      return text;
    }
  }
}

/* A call's result as "N" or "-1 ENAME"; reads errno at once, so call it right
 * after the call (the other arguments of the same say() must leave errno alone). */
static const char* result(ssize_t value) {
  int error = errno;
  static char texts[8][40];
  static unsigned next;
  char* text = texts[next++ % 8];
  if (value >= 0)
    snprintf(text, sizeof(texts[0]), "%zd", value);
  else
    snprintf(text, sizeof(texts[0]), "-1 %s", errno_name(error));
  return text;
}

/* poll revents as names (POLLRDNORM/POLLWRNORM left out: they follow IN/OUT). */
static const char* mask_text(int revents) {
  static char texts[8][64];
  static unsigned next;
  char* text = texts[next++ % 8];
  if (revents < 0) {
    snprintf(text, sizeof(texts[0]), "-1 %s", errno_name(errno));
    return text;
  }
  static const struct {
    int bit;
    const char* name;
  } names[] = {{POLLIN, "IN"},   {POLLPRI, "PRI"}, {POLLOUT, "OUT"},
               {POLLERR, "ERR"}, {POLLHUP, "HUP"}, {POLLRDHUP, "RDHUP"}};
  text[0] = '\0';
  for (size_t index = 0; index < sizeof(names) / sizeof(names[0]); ++index) {
    if ((revents & names[index].bit) == 0) continue;
    if (text[0] != '\0') strcat(text, "|");
    strcat(text, names[index].name);
  }
  if (text[0] == '\0') strcpy(text, "none");
  return text;
}

static const char* yes_no(int condition) { return condition ? "yes" : "no"; }

/* ------------------------------------------------------------------ helpers */

static void sleep_ms(long milliseconds) {
  struct timespec duration = {milliseconds / 1000, (milliseconds % 1000) * 1000000L};
  while (nanosleep(&duration, &duration) != 0 && errno == EINTR) {
  }
}

static long long now_ms(void) {
  struct timespec time;
  clock_gettime(CLOCK_MONOTONIC, &time);
  return (long long)time.tv_sec * 1000 + time.tv_nsec / 1000000;
}

/* The subject, ending early: kills the peer and prints what it had said
 * (only async-signal-safe calls: the alarm handler uses it too). */
static void end_peer_and_print_its_lines(void) {
  if (peer_side || peer_pid <= 0) return;
  if (!peer_reaped) {
    kill(peer_pid, SIGKILL);
    while (waitpid(peer_pid, NULL, 0) < 0 && errno == EINTR) {
    }
    peer_reaped = 1;
  }
  char lines[4096];
  ssize_t got;
  while (report_read_fd >= 0 && (got = read(report_read_fd, lines, sizeof(lines))) != 0) {
    if (got < 0) {
      if (errno == EINTR) continue;
      break;
    }
    write_all(STDOUT_FILENO, lines, (size_t)got);
  }
}

__attribute__((noreturn)) static void internal_failure(const char* what) {
  say("INTERNAL FAILURE: %s (%s)", what, errno_name(errno));
  end_peer_and_print_its_lines();
  _exit(1);
}

/* The other process's turn: one byte through its control pipe. */
static void tell(void) {
  if (write_all(control_out, "!", 1) != 0) internal_failure("control pipe write");
}

static void await_turn(void) {
  char byte;
  for (;;) {
    ssize_t got = read(control_in, &byte, 1);
    if (got == 1) return;
    if (got < 0 && errno == EINTR) continue;
    internal_failure("the other side went away (control pipe)");
  }
}

static void tell_value(unsigned long long value) {
  if (write_all(control_out, &value, sizeof(value)) != 0) internal_failure("control pipe write");
}

static unsigned long long await_value(void) {
  unsigned long long value = 0;
  size_t done = 0;
  while (done < sizeof(value)) {
    ssize_t got = read(control_in, (char*)&value + done, sizeof(value) - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) internal_failure("the other side went away (control pipe)");
    done += (size_t)got;
  }
  return value;
}

static uint32_t crc_of(const void* data, ssize_t length) {
  return length > 0 ? crc32_update(0, data, (size_t)length) : 0;
}

static void* allocate(size_t length) {
  void* memory = malloc(length > 0 ? length : 1);
  if (memory == NULL) internal_failure("out of memory");
  return memory;
}

static unsigned char* pattern(size_t length, uint64_t seed) {
  unsigned char* data = allocate(length);
  struct byte_stream stream;
  byte_stream_init(&stream, seed);
  byte_stream_fill(&stream, data, length);
  return data;
}

/* Reads until `length` bytes, end of stream or an error: the count (less at
 * end of stream), or -1 with errno if nothing was read. */
static ssize_t read_exactly(int fd, void* buffer, size_t length) {
  size_t done = 0;
  while (done < length) {
    ssize_t got = read(fd, (char*)buffer + done, length - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return done > 0 ? (ssize_t)done : -1;
    if (got == 0) break;
    done += (size_t)got;
  }
  return (ssize_t)done;
}

/* write_all, reporting the outcome as a count or -1. */
static ssize_t write_fully(int fd, const void* buffer, size_t length) {
  return write_all(fd, buffer, length) == 0 ? (ssize_t)length : -1;
}

static int readable_now(int fd) {
  int bytes = -1;
  if (ioctl(fd, FIONREAD, &bytes) != 0) return -1;
  return bytes;
}

/* FIONREAD once it equals `want`, or its last value after SETTLE_MS. */
static int wait_readable(int fd, int want) {
  long long deadline = now_ms() + SETTLE_MS;
  int bytes;
  while ((bytes = readable_now(fd)) != want && now_ms() < deadline) sleep_ms(1);
  return bytes;
}

/* poll(2) on one fd: its revents (0 on a timeout), or -1. */
static int poll_one(int fd, short events, int timeout_ms) {
  struct pollfd entry = {fd, events, 0};
  int ready;
  while ((ready = poll(&entry, 1, timeout_ms)) < 0 && errno == EINTR) {
  }
  return ready < 0 ? -1 : entry.revents;
}

/* poll(0) until revents has one of `bits`, for at most SETTLE_MS: the last revents. */
static int poll_until(int fd, int bits) {
  long long deadline = now_ms() + SETTLE_MS;
  int revents;
  while (((revents = poll_one(fd, POLLIN | POLLOUT | POLLRDHUP | POLLPRI, 0)) < 0 ||
          (revents & bits) == 0) &&
         now_ms() < deadline)
    sleep_ms(1);
  return revents;
}

/* Writes 1000-byte pieces (1 ms apart, at most SETTLE_MS) until one fails
 * with anything but EAGAIN: that errno, or 0 if none did. Never blocks (a
 * peer that neither reads nor resets would hold a blocking write forever). */
static int write_until_error(int fd, int flags) {
  static char piece[1000];
  long long deadline = now_ms() + SETTLE_MS;
  while (now_ms() < deadline) {
    if (send(fd, piece, sizeof(piece), flags | MSG_DONTWAIT) < 0 && errno != EAGAIN) return errno;
    sleep_ms(1);
  }
  return 0;
}

static int socket_error(int fd) {
  int error = -1;
  socklen_t length = sizeof(error);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) return -errno;
  return error;
}

static const char* socket_error_text(int fd) {
  int error = socket_error(fd);
  if (error < 0) {
    errno = -error;
    return result(-1);
  }
  return errno_name(error);
}

static int close_connection(void) {
  int closed = close(connection_fd);
  connection_fd = -1;
  return closed;
}

/* Reads the peer's pattern stream (seed) until end of stream or an error,
 * checking every byte: the total, and how it ended (EOF or the errno name). */
struct drained {
  unsigned long long total;
  int content_ok;
  const char* end;
};

static struct drained drain_checking(int fd, uint64_t seed, unsigned long long stop_after) {
  struct drained outcome = {0, 1, "none"};
  enum { kPiece = 64 << 10 };
  unsigned char* buffer = allocate(kPiece);
  unsigned char* expected = allocate(kPiece);
  struct byte_stream stream;
  byte_stream_init(&stream, seed);
  for (;;) {
    if (stop_after > 0 && outcome.total >= stop_after) break;
    ssize_t got = read(fd, buffer, kPiece);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      outcome.end = got == 0 ? "EOF" : errno_name(errno);
      break;
    }
    byte_stream_fill(&stream, expected, (size_t)got);
    if (memcmp(buffer, expected, (size_t)got) != 0) outcome.content_ok = 0;
    outcome.total += (unsigned long long)got;
  }
  free(buffer);
  free(expected);
  return outcome;
}

/* Writes `total` bytes of the pattern stream (seed) in `piece`-byte writes,
 * publishing the count after each in peer_written. */
static ssize_t write_pattern(int fd, unsigned long long total, uint64_t seed, size_t piece) {
  unsigned char* buffer = allocate(piece);
  struct byte_stream stream;
  byte_stream_init(&stream, seed);
  unsigned long long done = 0;
  while (total == 0 || done < total) {
    size_t length = piece;
    if (total > 0 && total - done < length) length = (size_t)(total - done);
    byte_stream_fill(&stream, buffer, length);
    if (write_all(fd, buffer, length) != 0) {
      free(buffer);
      return -1;
    }
    done += length;
    atomic_store(peer_written, done);
  }
  free(buffer);
  return (ssize_t)done;
}

/* ------------------------------------------------------------------ cases */

/* MSG_PEEK: peeking returns the bytes a read then returns, and leaves them. */
static void peek_subject(int fd) {
  await_turn();
  say("fionread=%d", wait_readable(fd, 1000));
  unsigned char peeked[2000], small[10], data[2000];
  ssize_t got = recv(fd, small, sizeof(small), MSG_PEEK);
  say("peek_10=%s crc=%08x", result(got), crc_of(small, got));
  got = recv(fd, peeked, 1000, MSG_PEEK);
  say("peek_1000=%s crc=%08x", result(got), crc_of(peeked, got));
  got = recv(fd, peeked, sizeof(peeked), MSG_PEEK | MSG_DONTWAIT);
  say("peek_2000_dontwait=%s crc=%08x", result(got), crc_of(peeked, got));
  say("fionread_after_peeks=%d", readable_now(fd));
  got = read(fd, data, sizeof(data));
  say("read=%s crc=%08x same_as_peeked=%s", result(got), crc_of(data, got),
      yes_no(got == 1000 && memcmp(data, peeked, 1000) == 0));
  say("fionread_after_read=%d", readable_now(fd));
  got = recv(fd, peeked, 10, MSG_PEEK | MSG_DONTWAIT);
  say("peek_empty_dontwait=%s", result(got));
}

static void peek_peer(int fd) {
  unsigned char* data = pattern(1000, 1);
  say("write=%s", result(write_fully(fd, data, 1000)));
  free(data);
  tell();
}

/* MSG_PEEK|MSG_WAITALL waits for the whole amount, as a reading WAITALL does. */
static void peek_waitall_subject(int fd) {
  unsigned char peeked[900], data[900];
  ssize_t got = recv(fd, peeked, sizeof(peeked), MSG_PEEK | MSG_WAITALL);
  say("peek_waitall_900=%s crc=%08x", result(got), crc_of(peeked, got));
  got = recv(fd, data, sizeof(data), MSG_WAITALL);
  say("recv_waitall_900=%s crc=%08x", result(got), crc_of(data, got));
}

static void three_delayed_pieces(int fd, const size_t* sizes, uint64_t seed) {
  size_t total = sizes[0] + sizes[1] + sizes[2];
  unsigned char* data = pattern(total, seed);
  size_t offset = 0;
  for (int index = 0; index < 3; ++index) {
    if (index > 0) sleep_ms(100);
    say("write_%zu=%s", sizes[index], result(write_fully(fd, data + offset, sizes[index])));
    offset += sizes[index];
  }
  free(data);
}

static void peek_waitall_peer(int fd) {
  const size_t sizes[3] = {300, 300, 300};
  three_delayed_pieces(fd, sizes, 2);
}

/* MSG_WAITALL: one recv returns all of three delayed pieces; recvmsg too. */
static void waitall_subject(int fd) {
  enum { kTotal = 1000 + 1 + 70000 };
  unsigned char* data = allocate(kTotal);
  ssize_t got = recv(fd, data, kTotal, MSG_WAITALL);
  say("recv_waitall_%d=%s crc=%08x", kTotal, result(got), crc_of(data, got));
  tell();
  unsigned char pieces[60];
  struct iovec vector[3] = {{pieces, 25}, {pieces + 25, 25}, {pieces + 50, 10}};
  struct msghdr message = {0};
  message.msg_iov = vector;
  message.msg_iovlen = 3;
  got = recvmsg(fd, &message, MSG_WAITALL);
  say("recvmsg_waitall_60=%s crc=%08x", result(got), crc_of(pieces, got));
  free(data);
}

static void waitall_peer(int fd) {
  const size_t sizes[3] = {1000, 1, 70000};
  three_delayed_pieces(fd, sizes, 3);
  await_turn();
  const size_t more[3] = {10, 20, 30};
  three_delayed_pieces(fd, more, 4);
}

/* MSG_WAITALL ends early at the end of the stream. */
static void waitall_eof_subject(int fd) {
  unsigned char data[1000];
  ssize_t got = recv(fd, data, sizeof(data), MSG_WAITALL);
  say("recv_waitall_1000=%s crc=%08x", result(got), crc_of(data, got));
  got = recv(fd, data, sizeof(data), MSG_WAITALL);
  say("recv_waitall_again=%s", result(got));
}

static void waitall_eof_peer(int fd) {
  unsigned char* data = pattern(100, 5);
  say("write=%s", result(write_fully(fd, data, 100)));
  free(data);
  say("shutdown_wr=%s", result(shutdown(fd, SHUT_WR)));
}

/* MSG_DONTWAIT on an empty socket: EAGAIN, whatever else the flags say. */
static void dontwait_empty_subject(int fd) {
  char data[100];
  say("recv_dontwait=%s", result(recv(fd, data, sizeof(data), MSG_DONTWAIT)));
  say("recv_peek_dontwait=%s", result(recv(fd, data, sizeof(data), MSG_PEEK | MSG_DONTWAIT)));
  say("recv_waitall_dontwait=%s", result(recv(fd, data, sizeof(data), MSG_WAITALL | MSG_DONTWAIT)));
  struct iovec piece = {data, sizeof(data)};
  struct msghdr message = {0};
  message.msg_iov = &piece;
  message.msg_iovlen = 1;
  say("recvmsg_dontwait=%s", result(recvmsg(fd, &message, MSG_DONTWAIT)));
  say("recv_empty_buffer_dontwait=%s", result(recv(fd, data, 0, MSG_DONTWAIT)));
  tell();
  say("read_blocking=%s", result(read(fd, data, sizeof(data))));
  say("recv_dontwait_after=%s", result(recv(fd, data, sizeof(data), MSG_DONTWAIT)));
}

static void dontwait_empty_peer(int fd) {
  await_turn();
  say("write=%s", result(write(fd, "hello", 5)));
}

/* O_NONBLOCK on an empty socket: EAGAIN from every way of reading. */
static void nonblock_empty_subject(int fd) {
  int flags = fcntl(fd, F_GETFL);
  say("set_nonblock=%s", result(fcntl(fd, F_SETFL, flags | O_NONBLOCK)));
  char data[100];
  struct iovec piece = {data, sizeof(data)};
  say("read=%s", result(read(fd, data, sizeof(data))));
  say("readv=%s", result(readv(fd, &piece, 1)));
  say("recv=%s", result(recv(fd, data, sizeof(data), 0)));
  say("recv_waitall=%s", result(recv(fd, data, sizeof(data), MSG_WAITALL)));
  say("recv_peek=%s", result(recv(fd, data, sizeof(data), MSG_PEEK)));
  struct msghdr message = {0};
  message.msg_iov = &piece;
  message.msg_iovlen = 1;
  say("recvmsg=%s", result(recvmsg(fd, &message, 0)));
  struct mmsghdr messages[1];
  memset(messages, 0, sizeof(messages));
  messages[0].msg_hdr.msg_iov = &piece;
  messages[0].msg_hdr.msg_iovlen = 1;
  say("recvmmsg=%s", result(recvmmsg(fd, messages, 1, 0, NULL)));
  tell();
  await_turn();
  say("fionread=%d", wait_readable(fd, 5));
  say("read_after_write=%s", result(read(fd, data, sizeof(data))));
  say("read_again=%s", result(read(fd, data, sizeof(data))));
  say("clear_nonblock=%s", result(fcntl(fd, F_SETFL, flags)));
}

static void nonblock_empty_peer(int fd) {
  await_turn();
  say("write=%s", result(write(fd, "hello", 5)));
  tell();
}

/* O_NONBLOCK writes fill the buffers, then EAGAIN; all of it arrives. */
static void nonblock_full_subject(int fd) {
  int flags = fcntl(fd, F_GETFL);
  say("set_nonblock=%s", result(fcntl(fd, F_SETFL, flags | O_NONBLOCK)));
  enum { kPiece = 64 << 10 };
  unsigned char* buffer = allocate(kPiece);
  struct byte_stream stream;
  byte_stream_init(&stream, 6);
  unsigned long long total = 0;
  size_t pending = 0, pending_offset = 0; /* bytes of buffer not yet taken */
  int error = 0, dontwait_error = 0;
  for (int attempt = 0; attempt < 100000; ++attempt) {
    if (pending == 0) {
      byte_stream_fill(&stream, buffer, kPiece);
      pending = kPiece;
      pending_offset = 0;
    }
    ssize_t sent = write(fd, buffer + pending_offset, pending);
    if (sent < 0 && errno == EAGAIN) {
      /* Full: a send right after finds no room either. (The kernel may free
       * some between the two calls, under load: then fill on, the next byte
       * of the stream, so that the peer's check still holds.) */
      error = errno;
      sent = send(fd, buffer + pending_offset, 1, MSG_DONTWAIT);
      if (sent < 0) {
        dontwait_error = errno;
        break;
      }
    }
    if (sent < 0) {
      if (errno == EINTR) continue;
      error = errno;
      dontwait_error = errno;
      break;
    }
    total += (unsigned long long)sent;
    pending -= (size_t)sent;
    pending_offset += (size_t)sent;
  }
  say("write_until_full=-1 %s", errno_name(error));
  say("send_dontwait_full=-1 %s", errno_name(dontwait_error));
  say("poll_full=%s", mask_text(poll_one(fd, POLLOUT, 0) & POLLOUT));
  tell_value(total);
  await_turn();
  say("poll_out_after_drain=%s", mask_text(poll_one(fd, POLLOUT, SETTLE_MS)));
  say("clear_nonblock=%s", result(fcntl(fd, F_SETFL, flags)));
  free(buffer);
}

static void nonblock_full_peer(int fd) {
  unsigned long long total = await_value();
  struct drained outcome = drain_checking(fd, 6, total);
  say("drained_all=%s content_ok=%s", yes_no(outcome.total == total), yes_no(outcome.content_ok));
  tell();
}

/* FIONREAD / SIOCINQ: exactly the bytes waiting, before and after reads. */
static void fionread_subject(int fd) {
  await_turn();
  say("fionread=%d", wait_readable(fd, 12345));
  int inq = -1;
  const char* outcome = result(ioctl(fd, SIOCINQ, &inq));
  say("siocinq=%s value=%d", outcome, inq);
  unsigned char* data = allocate(20000);
  say("read_5000=%s", result(read(fd, data, 5000)));
  say("fionread_after_5000=%d", readable_now(fd));
  say("read_rest=%s", result(read(fd, data + 5000, 8000)));
  say("crc=%08x", crc_of(data, 12345));
  say("fionread_after_all=%d", readable_now(fd));
  tell();
  say("read_eof=%s", result(read(fd, data, 100)));
  say("fionread_at_eof=%d", readable_now(fd));
  free(data);
}

static void fionread_peer(int fd) {
  unsigned char* data = pattern(12345, 7);
  say("write_5000=%s", result(write_fully(fd, data, 5000)));
  say("write_5000=%s", result(write_fully(fd, data + 5000, 5000)));
  say("write_2345=%s", result(write_fully(fd, data + 10000, 2345)));
  free(data);
  tell();
  await_turn();
  say("shutdown_wr=%s", result(shutdown(fd, SHUT_WR)));
}

/* SIOCOUTQ: 0 when idle, and 0 again once the peer has read everything.
 * (TCP counts unacknowledged bytes: the warm-up's last byte may wait for a
 * delayed ACK, so "idle" is 0 within a bounded wait.) */
static int outq_settles_to_zero(int fd) {
  int queued = -1;
  long long deadline = now_ms() + SETTLE_MS;
  while ((ioctl(fd, SIOCOUTQ, &queued) != 0 || queued != 0) && now_ms() < deadline) sleep_ms(1);
  return queued == 0;
}

static void siocoutq_subject(int fd) {
  say("outq_idle_is_zero=%s", yes_no(outq_settles_to_zero(fd)));
  unsigned char* data = pattern(50000, 8);
  say("write_50000=%s", result(write_fully(fd, data, 50000)));
  free(data);
  tell();
  await_turn();
  say("outq_after_peer_read_is_zero=%s", yes_no(outq_settles_to_zero(fd)));
}

static void siocoutq_peer(int fd) {
  await_turn();
  unsigned char* data = allocate(50000);
  ssize_t got = read_exactly(fd, data, 50000);
  say("read=%s crc=%08x", result(got), crc_of(data, got));
  free(data);
  tell();
}

/* readv/writev with 64 iovecs of varied sizes (some empty), both ways. */
static size_t iovec_layout(struct iovec* vector, unsigned char* base, size_t total, unsigned multiplier,
                           unsigned modulus, unsigned minimum) {
  size_t offset = 0;
  for (unsigned index = 0; index < 64; ++index) {
    size_t length = minimum + (index * multiplier) % modulus;
    if (total > 0 && length > total - offset) length = total - offset;
    vector[index].iov_base = base + offset;
    vector[index].iov_len = length;
    offset += length;
  }
  return offset;
}

static void write_64(int fd, uint64_t seed, unsigned multiplier) {
  struct iovec vector[64];
  size_t total = iovec_layout(vector, NULL, 0, multiplier, 3001, 0);
  unsigned char* data = pattern(total, seed);
  iovec_layout(vector, data, 0, multiplier, 3001, 0);
  ssize_t sent = writev(fd, vector, 64);
  say("writev_64=%s of %zu crc=%08x", result(sent), total, crc_of(data, (ssize_t)total));
  free(data);
}

static void read_64(int fd, size_t total) {
  unsigned char* data = allocate(total);
  size_t done = 0;
  ssize_t got = 0;
  while (done < total) {
    struct iovec vector[64];
    iovec_layout(vector, data + done, total - done, 104729, 2003, 1);
    got = readv(fd, vector, 64);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += (size_t)got;
  }
  say("readv_64_total=%zu end=%s crc=%08x", done, got > 0 ? "ok" : result(got), crc_of(data, (ssize_t)done));
  free(data);
}

static size_t total_64(unsigned multiplier) {
  struct iovec vector[64];
  return iovec_layout(vector, NULL, 0, multiplier, 3001, 0);
}

static void iov64_subject(int fd) {
  write_64(fd, 9, 7919);
  read_64(fd, total_64(6007));
}

static void iov64_peer(int fd) {
  read_64(fd, total_64(7919));
  write_64(fd, 10, 6007);
}

/* The iovec count limits: over IOV_MAX is refused, IOV_MAX is fine. */
static void iov_limits_subject(int fd) {
  enum { kCount = IOV_MAX + 1 };
  static struct iovec vector[kCount];
  static unsigned char data[kCount];
  for (int index = 0; index < kCount; ++index) {
    data[index] = (unsigned char)(index * 31 + 7);
    vector[index].iov_base = data + index;
    vector[index].iov_len = 1;
  }
  say("writev_iov_max_plus_1=%s", result(writev(fd, vector, kCount)));
  volatile int negative = -1; /* a run-time value: the compiler would refuse a literal */
  say("writev_negative=%s", result(writev(fd, vector, negative)));
  say("writev_zero=%s", result(writev(fd, vector, 0)));
  struct msghdr message = {0};
  message.msg_iov = vector;
  message.msg_iovlen = kCount;
  say("sendmsg_iov_max_plus_1=%s", result(sendmsg(fd, &message, 0)));
  say("readv_iov_max_plus_1=%s", result(readv(fd, vector, kCount)));
  say("recvmsg_iov_max_plus_1=%s", result(recvmsg(fd, &message, MSG_DONTWAIT)));
  say("writev_iov_max=%s crc=%08x", result(writev(fd, vector, IOV_MAX)), crc_of(data, IOV_MAX));
}

static void iov_limits_peer(int fd) {
  unsigned char data[IOV_MAX];
  ssize_t got = read_exactly(fd, data, sizeof(data));
  say("read=%s crc=%08x", result(got), crc_of(data, got));
}

/* A null message header (or array of them) is refused with EFAULT, as the
   kernel refuses it, and the connection goes on. A variable keeps the
   compiler from seeing the null. */
static void null_messages_subject(int fd) {
  struct msghdr* volatile none = NULL;
  struct mmsghdr* volatile no_array = NULL;
  say("sendmsg_null=%s", result(sendmsg(fd, none, 0)));
  say("recvmsg_null=%s", result(recvmsg(fd, none, MSG_DONTWAIT)));
  say("sendmmsg_null=%s", result(sendmmsg(fd, no_array, 1, 0)));
  say("recvmmsg_null=%s", result(recvmmsg(fd, no_array, 1, MSG_DONTWAIT, NULL)));
  /* No messages asked for: nothing to read, nothing refused. */
  say("sendmmsg_null_none=%s", result(sendmmsg(fd, no_array, 0, 0)));
  say("recvmmsg_null_none=%s", result(recvmmsg(fd, no_array, 0, MSG_DONTWAIT, NULL)));
  /* A bad timeout is refused before the messages are looked at. */
  struct timespec bad_timeout = {0, 2000000000L};
  say("recvmmsg_null_bad_timeout=%s", result(recvmmsg(fd, no_array, 1, 0, &bad_timeout)));
  write_64(fd, 3, 4001);
  read_64(fd, total_64(4003));
}

static void null_messages_peer(int fd) {
  read_64(fd, total_64(4001));
  write_64(fd, 4, 4003);
}

/* sendmsg/recvmsg with iovecs; what recvmsg reports besides the data. */
static const size_t kMessagePieces[8] = {1, 100, 0, 4096, 7, 20000, 3, 999};
#define MESSAGE_TOTAL 25206

static void sendmsg_recvmsg_subject(int fd) {
  unsigned char* data = pattern(MESSAGE_TOTAL, 11);
  struct iovec vector[8];
  size_t offset = 0;
  for (int index = 0; index < 8; ++index) {
    vector[index].iov_base = data + offset;
    vector[index].iov_len = kMessagePieces[index];
    offset += kMessagePieces[index];
  }
  struct msghdr message = {0};
  message.msg_iov = vector;
  message.msg_iovlen = 8;
  say("sendmsg=%s crc=%08x", result(sendmsg(fd, &message, 0)), crc_of(data, MESSAGE_TOTAL));
  free(data);
}

static void sendmsg_recvmsg_peer(int fd) {
  say("fionread=%d", wait_readable(fd, MESSAGE_TOTAL));
  unsigned char* data = allocate(MESSAGE_TOTAL);
  const size_t sizes[5] = {MESSAGE_TOTAL - 5000, 1000, 2000, 1500, 500};
  struct iovec vector[5];
  size_t offset = 0;
  for (int index = 0; index < 5; ++index) {
    vector[index].iov_base = data + offset;
    vector[index].iov_len = sizes[index];
    offset += sizes[index];
  }
  struct sockaddr_storage name;
  char control[64];
  struct msghdr message = {0};
  message.msg_name = &name;
  message.msg_namelen = sizeof(name);
  message.msg_iov = vector;
  message.msg_iovlen = 5;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  message.msg_flags = -1;
  ssize_t got = recvmsg(fd, &message, MSG_DONTWAIT);
  say("recvmsg=%s crc=%08x namelen=%u controllen=%zu flags=%#x", result(got), crc_of(data, got),
      (unsigned)message.msg_namelen, (size_t)message.msg_controllen, (unsigned)message.msg_flags);
  free(data);
}

/* MSG_TRUNC on TCP: the bytes are discarded, not copied. */
static void msg_trunc_subject(int fd) {
  say("fionread=%d", wait_readable(fd, 100));
  unsigned char data[100];
  memset(data, 0xAA, sizeof(data));
  ssize_t got = recv(fd, data, 40, MSG_TRUNC);
  int untouched = 1;
  for (int index = 0; index < 40; ++index) untouched &= data[index] == 0xAA;
  say("recv_trunc_40=%s buffer_untouched=%s", result(got), yes_no(untouched));
  say("fionread_after=%d", readable_now(fd));
  say("recv_trunc_null_20=%s", result(recv(fd, NULL, 20, MSG_TRUNC)));
  say("fionread_after_null=%d", readable_now(fd));
  got = read(fd, data, sizeof(data));
  say("read_rest=%s crc=%08x", result(got), crc_of(data, got));
}

static void msg_trunc_peer(int fd) {
  unsigned char* data = pattern(100, 12);
  say("write=%s", result(write_fully(fd, data, 100)));
  free(data);
}

/* sendmmsg/recvmmsg: message counts and lengths with all the data present. */
static void mmsg_subject(int fd) {
  unsigned char* data = pattern(960, 13);
  struct iovec vector[8];
  struct mmsghdr messages[4];
  memset(messages, 0, sizeof(messages));
  size_t offset = 0;
  for (int index = 0; index < 4; ++index) {
    size_t first = (size_t)index * 100 + 10, second = (size_t)index * 50 + 5;
    vector[2 * index] = (struct iovec){data + offset, first};
    vector[2 * index + 1] = (struct iovec){data + offset + first, second};
    offset += first + second;
    messages[index].msg_hdr.msg_iov = vector + 2 * index;
    messages[index].msg_hdr.msg_iovlen = 2;
  }
  int sent = sendmmsg(fd, messages, 4, 0);
  say("sendmmsg=%s lens=%u,%u,%u,%u crc=%08x", result(sent), messages[0].msg_len, messages[1].msg_len,
      messages[2].msg_len, messages[3].msg_len, crc_of(data, 960));
  free(data);
  await_turn();
  data = pattern(100, 14);
  say("send_100=%s", result(send(fd, data, 100, 0)));
  free(data);
}

static void mmsg_peer(int fd) {
  say("fionread=%d", wait_readable(fd, 960));
  unsigned char data[1010];
  const size_t sizes[5] = {100, 200, 300, 360, 50};
  struct iovec vector[5];
  struct mmsghdr messages[5];
  memset(messages, 0, sizeof(messages));
  size_t offset = 0;
  for (int index = 0; index < 5; ++index) {
    vector[index] = (struct iovec){data + offset, sizes[index]};
    offset += sizes[index];
    messages[index].msg_hdr.msg_iov = vector + index;
    messages[index].msg_hdr.msg_iovlen = 1;
    messages[index].msg_len = 12345;
  }
  int got = recvmmsg(fd, messages, 5, MSG_DONTWAIT, NULL);
  say("recvmmsg_dontwait=%s lens=%u,%u,%u,%u,%u crc=%08x", result(got), messages[0].msg_len,
      messages[1].msg_len, messages[2].msg_len, messages[3].msg_len, messages[4].msg_len,
      crc_of(data, 960));
  say("recvmmsg_empty_dontwait=%s", result(recvmmsg(fd, messages, 5, MSG_DONTWAIT, NULL)));
  tell();
  for (int index = 0; index < 2; ++index) messages[index].msg_len = 12345;
  vector[0].iov_len = vector[1].iov_len = 100;
  got = recvmmsg(fd, messages, 2, MSG_WAITFORONE, NULL);
  say("recvmmsg_waitforone=%s lens=%u,%u crc=%08x", result(got), messages[0].msg_len,
      messages[1].msg_len, crc_of(data, 100));
}

/* recvmmsg on a blocking socket without MSG_WAITFORONE fills every message. */
static void recvmmsg_blocking_subject(int fd) {
  unsigned char data[200];
  struct iovec vector[2] = {{data, 100}, {data + 100, 100}};
  struct mmsghdr messages[2];
  memset(messages, 0, sizeof(messages));
  for (int index = 0; index < 2; ++index) {
    messages[index].msg_hdr.msg_iov = vector + index;
    messages[index].msg_hdr.msg_iovlen = 1;
    messages[index].msg_len = 12345;
  }
  int got = recvmmsg(fd, messages, 2, 0, NULL);
  say("recvmmsg_blocking=%s lens=%u,%u crc=%08x", result(got), messages[0].msg_len, messages[1].msg_len,
      crc_of(data, 200));
}

static void recvmmsg_blocking_peer(int fd) {
  unsigned char* data = pattern(200, 15);
  say("write_100=%s", result(write_fully(fd, data, 100)));
  sleep_ms(200);
  say("write_100=%s", result(write_fully(fd, data + 100, 100)));
  free(data);
}

/* recvmmsg at the end of the stream: every message after the data is empty. */
static void recvmmsg_eof_subject(int fd) {
  await_turn();
  say("poll_rdhup=%s", mask_text(poll_one(fd, POLLRDHUP, SETTLE_MS)));
  unsigned char data[300];
  struct iovec vector[3] = {{data, 100}, {data + 100, 100}, {data + 200, 100}};
  struct mmsghdr messages[3];
  memset(messages, 0, sizeof(messages));
  for (int index = 0; index < 3; ++index) {
    messages[index].msg_hdr.msg_iov = vector + index;
    messages[index].msg_hdr.msg_iovlen = 1;
    messages[index].msg_len = 12345;
  }
  int got = recvmmsg(fd, messages, 3, 0, NULL);
  say("recvmmsg_at_eof=%s lens=%u,%u,%u crc=%08x", result(got), messages[0].msg_len,
      messages[1].msg_len, messages[2].msg_len, crc_of(data, 100));
  say("recvmmsg_after_eof=%s", result(recvmmsg(fd, messages, 3, 0, NULL)));
}

static void recvmmsg_eof_peer(int fd) {
  unsigned char* data = pattern(100, 16);
  say("write_100=%s", result(write_fully(fd, data, 100)));
  free(data);
  say("shutdown_wr=%s", result(shutdown(fd, SHUT_WR)));
  tell();
}

/* sendfile from a file (with and without an offset) and splice from a pipe
 * into the socket; the peer splices from the socket into a pipe. */
#define SENDFILE_FILE 300000
#define SENDFILE_NULL 100000
#define SPLICE_IN 50000

static void sendfile_splice_subject(int fd) {
  char name[] = "/tmp/socket_semantics.XXXXXX";
  int file = mkstemp(name);
  if (file < 0) internal_failure("mkstemp");
  unlink(name);
  unsigned char* content = pattern(SENDFILE_FILE, 17);
  if (write_all(file, content, SENDFILE_FILE) != 0) internal_failure("writing the temporary file");
  lseek(file, 0, SEEK_SET);
  off_t offset = 0;
  ssize_t sent = 0, total = 0;
  while (total < SENDFILE_FILE) {
    sent = sendfile(fd, file, &offset, (size_t)(SENDFILE_FILE - total));
    if (sent <= 0) break;
    total += sent;
  }
  const char* outcome = sent > 0 ? "ok" : result(sent);
  say("sendfile_offset total=%zd end=%s offset=%lld file_position=%lld", total, outcome,
      (long long)offset, (long long)lseek(file, 0, SEEK_CUR));
  total = 0;
  while (total < SENDFILE_NULL) {
    sent = sendfile(fd, file, NULL, (size_t)(SENDFILE_NULL - total));
    if (sent <= 0) break;
    total += sent;
  }
  outcome = sent > 0 ? "ok" : result(sent);
  say("sendfile_null total=%zd end=%s file_position=%lld", total, outcome,
      (long long)lseek(file, 0, SEEK_CUR));
  close(file);
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) internal_failure("pipe");
  unsigned char* piped = pattern(SPLICE_IN, 18);
  if (write_all(pipe_fds[1], piped, SPLICE_IN) != 0) internal_failure("filling the pipe");
  total = 0;
  while (total < SPLICE_IN) {
    sent = splice(pipe_fds[0], NULL, fd, NULL, (size_t)(SPLICE_IN - total), 0);
    if (sent <= 0) break;
    total += sent;
  }
  say("splice_pipe_to_socket total=%zd end=%s", total, sent > 0 ? "ok" : result(sent));
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  uint32_t crc = crc32_update(0, content, SENDFILE_FILE);
  crc = crc32_update(crc, content, SENDFILE_NULL);
  crc = crc32_update(crc, piped, SPLICE_IN);
  say("sent_crc=%08x", crc);
  free(content);
  free(piped);
}

static void sendfile_splice_peer(int fd) {
  const size_t total = SENDFILE_FILE + SENDFILE_NULL + SPLICE_IN;
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) internal_failure("pipe");
  unsigned char* data = allocate(total);
  size_t done = 0;
  ssize_t moved = 0;
  while (done < total) {
    moved = splice(fd, NULL, pipe_fds[1], NULL, total - done, 0);
    if (moved < 0 && errno == EINTR) continue;
    if (moved <= 0) break;
    if (read_exactly(pipe_fds[0], data + done, (size_t)moved) != moved) internal_failure("pipe read");
    done += (size_t)moved;
  }
  say("splice_socket_to_pipe total=%zu end=%s crc=%08x", done, moved > 0 ? "ok" : result(moved),
      crc_of(data, (ssize_t)done));
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  free(data);
}

/* MSG_MORE followed by a plain send: everything arrives. */
static void msg_more_subject(int fd) {
  unsigned char* data = pattern(200, 19);
  say("send_more_100=%s", result(send(fd, data, 100, MSG_MORE)));
  say("send_100=%s", result(send(fd, data + 100, 100, 0)));
  free(data);
}

static void msg_more_peer(int fd) {
  unsigned char data[200];
  ssize_t got = recv(fd, data, sizeof(data), MSG_WAITALL);
  say("recv_waitall_200=%s crc=%08x", result(got), crc_of(data, got));
}

/* MSG_MORE with nothing after it: TCP still sends it (within its probe
 * timer, some 200 ms), so the peer sees it within SETTLE_MS. */
static void msg_more_alone_subject(int fd) {
  unsigned char* data = pattern(101, 20);
  say("send_more_100=%s", result(send(fd, data, 100, MSG_MORE)));
  tell();
  await_turn();
  say("send_1=%s", result(send(fd, data + 100, 1, 0)));
  free(data);
}

static void msg_more_alone_peer(int fd) {
  await_turn();
  int revents = poll_one(fd, POLLIN, SETTLE_MS);
  say("arrived_alone=%s", mask_text(revents));
  tell();
  unsigned char data[101];
  ssize_t got = recv(fd, data, sizeof(data), MSG_WAITALL);
  say("recv_waitall_101=%s crc=%08x", result(got), crc_of(data, got));
}

/* shutdown(SHUT_WR): the peer reads EOF, and can still write back. */
static void shut_wr_subject(int fd) {
  say("shutdown_wr=%s", result(shutdown(fd, SHUT_WR)));
  say("poll_self=%s", mask_text(poll_one(fd, POLLIN | POLLOUT | POLLRDHUP, 0)));
  tell();
  await_turn();
  unsigned char data[100];
  ssize_t got = read_exactly(fd, data, sizeof(data));
  say("read_100=%s crc=%08x", result(got), crc_of(data, got));
  const char* outcome = result(send(fd, data, 10, MSG_NOSIGNAL));
  say("send_nosignal=%s sigpipes=%d", outcome, (int)sigpipes);
  outcome = result(write(fd, data, 10));
  say("write=%s sigpipes=%d", outcome, (int)sigpipes);
  say("shutdown_wr_again=%s", result(shutdown(fd, SHUT_WR)));
  tell();
  say("read_eof=%s", result(read(fd, data, sizeof(data))));
}

static void shut_wr_peer(int fd) {
  await_turn();
  say("poll=%s", mask_text(poll_one(fd, POLLIN | POLLRDHUP, SETTLE_MS)));
  char data[100];
  say("read=%s", result(read(fd, data, sizeof(data))));
  say("read_again=%s", result(read(fd, data, sizeof(data))));
  unsigned char* reply = pattern(100, 21);
  say("write_100=%s", result(write_fully(fd, reply, 100)));
  free(reply);
  tell();
  await_turn();
  say("shutdown_wr=%s", result(shutdown(fd, SHUT_WR)));
}

/* shutdown(SHUT_RD): reads end at once; writing goes on; what comes later. */
static void shut_rd_subject(int fd) {
  say("shutdown_rd=%s", result(shutdown(fd, SHUT_RD)));
  char data[200];
  say("read=%s", result(read(fd, data, sizeof(data))));
  say("recv_dontwait=%s", result(recv(fd, data, sizeof(data), MSG_DONTWAIT)));
  say("poll_self=%s", mask_text(poll_one(fd, POLLIN | POLLOUT | POLLRDHUP, 0)));
  unsigned char* message = pattern(100, 22);
  say("write_100=%s", result(write_fully(fd, message, 100)));
  free(message);
  tell();
  await_turn();
  say("fionread_after_peer_wrote_100=%d", wait_readable(fd, 100));
  ssize_t got = recv(fd, data, sizeof(data), MSG_DONTWAIT);
  say("recv_dontwait_after=%s crc=%08x", result(got), crc_of(data, got));
  say("read_after=%s", result(read(fd, data, sizeof(data))));
}

static void shut_rd_peer(int fd) {
  await_turn();
  unsigned char data[100];
  ssize_t got = read_exactly(fd, data, sizeof(data));
  say("read_100=%s crc=%08x", result(got), crc_of(data, got));
  say("poll=%s", mask_text(poll_one(fd, POLLIN | POLLOUT | POLLRDHUP, 0)));
  unsigned char* message = pattern(100, 23);
  say("write_100=%s", result(write_fully(fd, message, 100)));
  free(message);
  tell();
}

/* shutdown(SHUT_RDWR): no more reading or writing; data the peer sends
 * anyway resets the connection (RFC 1122, as Linux does). */
static void shut_rdwr_subject(int fd) {
  say("shutdown_rdwr=%s", result(shutdown(fd, SHUT_RDWR)));
  char data[200];
  say("read=%s", result(read(fd, data, sizeof(data))));
  say("send_nosignal=%s", result(send(fd, data, 10, MSG_NOSIGNAL)));
  say("poll_self=%s", mask_text(poll_one(fd, POLLIN | POLLOUT | POLLRDHUP, 0)));
  tell();
  await_turn();
  say("poll_after_peer_wrote=%s", mask_text(poll_until(fd, POLLERR)));
  say("read_after_peer_wrote=%s", result(read(fd, data, sizeof(data))));
  say("so_error=%s", socket_error_text(fd));
  say("read_again=%s", result(read(fd, data, sizeof(data))));
}

static void shut_rdwr_peer(int fd) {
  await_turn();
  say("poll=%s", mask_text(poll_one(fd, POLLIN | POLLRDHUP, SETTLE_MS)));
  char data[100] = {0};
  say("read=%s", result(read(fd, data, sizeof(data))));
  say("send_100=%s", result(send(fd, data, 100, MSG_NOSIGNAL)));
  say("then_writes_fail_with=%s", errno_name(write_until_error(fd, MSG_NOSIGNAL)));
  tell();
}

/* Writing after the peer closed: EPIPE and SIGPIPE (or none with MSG_NOSIGNAL). */
static void epipe_subject(int fd, int flags) {
  await_turn();
  int error = write_until_error(fd, flags);
  say("first_error=%s sigpipes=%d", errno_name(error), (int)sigpipes);
  const char* outcome = result(send(fd, "x", 1, flags));
  say("next_send=%s sigpipes=%d", outcome, (int)sigpipes);
  outcome = result(write(fd, "x", 1));
  say("write=%s sigpipes=%d", outcome, (int)sigpipes);
}

static void epipe_sigpipe_subject(int fd) { epipe_subject(fd, 0); }
static void epipe_nosignal_subject(int fd) { epipe_subject(fd, MSG_NOSIGNAL); }

/* The peer closes (and stays alive until the subject is done). */
static void close_and_wait_peer(int fd) {
  (void)fd;
  say("close=%s", result(close_connection()));
  tell();
}

/* close with unread data sends a reset: the writer sees ECONNRESET. */
static void close_unread_subject(int fd) {
  unsigned char* data = pattern(1000, 24);
  say("write_1000=%s", result(write_fully(fd, data, 1000)));
  free(data);
  tell();
  await_turn();
  int error = write_until_error(fd, MSG_NOSIGNAL);
  say("first_error=%s", errno_name(error));
  say("next_send=%s", result(send(fd, "x", 1, MSG_NOSIGNAL)));
  char buffer[10];
  say("read=%s", result(read(fd, buffer, sizeof(buffer))));
  say("sigpipes=%d", (int)sigpipes);
}

static void close_unread_peer(int fd) {
  await_turn();
  say("fionread=%d", wait_readable(fd, 1000));
  say("close_with_unread=%s", result(close_connection()));
  tell();
}

/* SO_ERROR after a reset: ECONNRESET once, then 0; poll shows it. */
static void so_error_reset_subject(int fd) {
  unsigned char* data = pattern(1000, 25);
  say("write_1000=%s", result(write_fully(fd, data, 1000)));
  free(data);
  tell();
  await_turn();
  say("poll=%s", mask_text(poll_until(fd, POLLERR | POLLHUP)));
  say("so_error=%s", socket_error_text(fd));
  say("so_error_again=%s", socket_error_text(fd));
  say("poll_after=%s", mask_text(poll_one(fd, POLLIN | POLLOUT | POLLRDHUP, 0)));
  char buffer[10];
  say("read=%s", result(read(fd, buffer, sizeof(buffer))));
  say("send_nosignal=%s", result(send(fd, "x", 1, MSG_NOSIGNAL)));
}

/* A large write then an immediate close (and exit): every byte still arrives. */
#define CLOSE_UNSENT_BYTES (8u << 20)

static void close_unsent_reader(int fd, uint64_t seed) {
  struct drained outcome = drain_checking(fd, seed, 0);
  say("received=%llu content_ok=%s end=%s", outcome.total, yes_no(outcome.content_ok), outcome.end);
}

static void close_unsent_writer(int fd, uint64_t seed) {
  unsigned char* data = pattern(CLOSE_UNSENT_BYTES, seed);
  say("write=%s", result(write_fully(fd, data, CLOSE_UNSENT_BYTES)));
  say("close=%s", result(close_connection()));
  free(data);
}

/* The peer writes and closes, then exits at once. */
static void close_unsent_subject(int fd) { close_unsent_reader(fd, 26); }

static void close_unsent_peer(int fd) {
  close_unsent_writer(fd, 26);
  _exit(0);
}

/* The subject writes and closes, and lives on while the peer reads. */
static void close_unsent_alive_subject(int fd) { close_unsent_writer(fd, 27); }
static void close_unsent_alive_peer(int fd) { close_unsent_reader(fd, 27); }

/* The peer _exits (without close) or is killed in the middle of a stream:
 * everything its writes returned for arrives, then EOF (its kernel closes the
 * socket in order: it had nothing unread). */
static void report_midstream(struct drained outcome) {
  unsigned long long written = atomic_load(peer_written);
  say("all_prior_bytes_arrived=%s content_ok=%s end=%s", yes_no(outcome.total >= written),
      yes_no(outcome.content_ok), outcome.end);
}

static void peer_exit_subject(int fd) {
  struct drained outcome = drain_checking(fd, 28, 0);
  say("received=%llu", outcome.total);
  report_midstream(outcome);
}

static void peer_exit_peer(int fd) {
  write_pattern(fd, 2u << 20, 28, 32u << 10);
  _exit(0);
}

/* The same with exit(3), as a program that ends without closing its socket. */
static void peer_exit_normal_peer(int fd) {
  write_pattern(fd, 2u << 20, 28, 32u << 10);
  exit(0);
}

static void peer_kill_subject(int fd) {
  struct drained before = drain_checking(fd, 29, 1u << 20);
  if (kill(peer_pid, SIGKILL) != 0) internal_failure("kill");
  while (waitpid(peer_pid, &peer_status, 0) < 0 && errno == EINTR) {
  }
  peer_reaped = 1;
  /* Go on reading the same stream: drain_checking restarts its pattern, so
   * check the rest against the pattern from where the first part ended. */
  struct drained after = {0, 1, "none"};
  enum { kPiece = 64 << 10 };
  unsigned char* buffer = allocate(kPiece);
  unsigned char* expected = allocate(kPiece);
  struct byte_stream stream;
  byte_stream_init(&stream, 29);
  for (unsigned long long skipped = 0; skipped < before.total;) {
    size_t length = before.total - skipped < kPiece ? (size_t)(before.total - skipped) : kPiece;
    byte_stream_fill(&stream, expected, length);
    skipped += length;
  }
  for (;;) {
    ssize_t got = read(fd, buffer, kPiece);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      after.end = got == 0 ? "EOF" : errno_name(errno);
      break;
    }
    byte_stream_fill(&stream, expected, (size_t)got);
    if (memcmp(buffer, expected, (size_t)got) != 0) after.content_ok = 0;
    after.total += (unsigned long long)got;
  }
  free(buffer);
  free(expected);
  struct drained outcome = {before.total + after.total, before.content_ok && after.content_ok, after.end};
  report_midstream(outcome);
}

static void peer_kill_peer(int fd) {
  write_pattern(fd, 0, 29, 32u << 10); /* until killed */
  say("write failed: %s", errno_name(errno));
}

/* A peer that ends (without close) with our bytes unread: its kernel resets
 * the connection, so the next read gets ECONNRESET, and then end of stream. */
static void peer_exit_unread_subject(int fd) {
  unsigned char* data = pattern(1000, 31);
  say("write_1000=%s", result(write_fully(fd, data, 1000)));
  free(data);
  tell();
  while (waitpid(peer_pid, &peer_status, 0) < 0 && errno == EINTR) {
  }
  peer_reaped = 1;
  char buffer[10];
  say("read=%s", result(read(fd, buffer, sizeof(buffer))));
  say("read_again=%s", result(read(fd, buffer, sizeof(buffer))));
}

static void peer_exit_unread_peer(int fd) {
  await_turn();
  say("fionread=%d", wait_readable(fd, 1000));
  _exit(0);
}

/* poll after the peer's shutdown(SHUT_WR), then after both. */
static void poll_shutdown_subject(int fd) {
  await_turn();
  say("poll_after_peer_shutdown=%s", mask_text(poll_one(fd, POLLIN | POLLRDHUP, SETTLE_MS)));
  char data[10];
  say("read=%s", result(read(fd, data, sizeof(data))));
  say("shutdown_wr=%s", result(shutdown(fd, SHUT_WR)));
  say("poll_after_both=%s", mask_text(poll_one(fd, POLLIN | POLLOUT | POLLRDHUP, 0)));
  tell();
}

static void poll_shutdown_peer(int fd) {
  say("shutdown_wr=%s", result(shutdown(fd, SHUT_WR)));
  tell();
  await_turn();
  say("poll_after_both=%s", mask_text(poll_one(fd, POLLIN | POLLRDHUP, SETTLE_MS)));
  char data[10];
  say("read=%s", result(read(fd, data, sizeof(data))));
}

/* poll after the peer's close, then after our write drew its reset. */
static void poll_close_subject(int fd) {
  await_turn();
  say("poll_after_peer_close=%s", mask_text(poll_one(fd, POLLIN | POLLRDHUP, SETTLE_MS)));
  char data[100] = {0};
  say("read=%s", result(read(fd, data, sizeof(data))));
  say("send_100=%s", result(send(fd, data, 100, MSG_NOSIGNAL)));
  say("poll_after_reset=%s", mask_text(poll_until(fd, POLLERR | POLLHUP)));
  say("so_error=%s", socket_error_text(fd));
  say("read_after_reset=%s", result(read(fd, data, sizeof(data))));
}

/* A wait that may never end on its own gets a guard alarm of its own: the
 * call is interrupted (EINTR) instead of the case ending in TIMEOUT. */
static volatile sig_atomic_t guard_fired;
static void on_alarm(int signal_number);

static void on_guard(int signal_number) {
  (void)signal_number;
  guard_fired = 1;
}

static void guard_begin(unsigned seconds) {
  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_handler = on_guard; /* no SA_RESTART: the call returns EINTR */
  sigaction(SIGALRM, &action, NULL);
  guard_fired = 0;
  alarm(seconds);
}

static void guard_end(void) {
  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_handler = on_alarm;
  sigaction(SIGALRM, &action, NULL);
  alarm(CASE_SECONDS);
}

static int set_timeout_option(int fd, int option, long milliseconds) {
  struct timeval value = {milliseconds / 1000, (milliseconds % 1000) * 1000};
  return setsockopt(fd, SOL_SOCKET, option, &value, sizeof(value));
}

/* SO_RCVTIMEO: a blocking read of an empty socket gives up with EAGAIN. */
static void rcvtimeo_subject(int fd) {
  say("set_rcvtimeo_200ms=%s", result(set_timeout_option(fd, SO_RCVTIMEO, 200)));
  char data[100];
  guard_begin(2);
  say("recv_empty=%s", result(recv(fd, data, sizeof(data), 0)));
  guard_end();
  guard_begin(2);
  say("read_empty=%s", result(read(fd, data, sizeof(data))));
  guard_end();
  tell();
  say("read_after_peer_wrote=%s", result(read(fd, data, sizeof(data))));
}

static void rcvtimeo_peer(int fd) {
  await_turn();
  say("write=%s", result(write(fd, "hello", 5)));
}

/* SO_SNDTIMEO: blocking writes into full buffers give up (a part, then EAGAIN). */
static void sndtimeo_subject(int fd) {
  say("set_sndtimeo_200ms=%s", result(set_timeout_option(fd, SO_SNDTIMEO, 200)));
  enum { kPiece = 64 << 10 };
  unsigned char* buffer = allocate(kPiece);
  struct byte_stream stream;
  byte_stream_init(&stream, 30);
  unsigned long long total = 0;
  size_t pending = 0, offset = 0;
  ssize_t sent = 0;
  const char* outcome = "none";
  for (int attempt = 0; attempt < 100000; ++attempt) {
    if (pending == 0) {
      byte_stream_fill(&stream, buffer, kPiece);
      pending = kPiece;
      offset = 0;
    }
    guard_begin(2);
    sent = write(fd, buffer + offset, pending);
    outcome = result(sent);
    guard_end();
    if (sent > 0) {
      total += (unsigned long long)sent;
      pending -= (size_t)sent;
      offset += (size_t)sent;
    }
    if (sent < 0 || guard_fired) break;
  }
  say("writes_end_with=%s%s", outcome, guard_fired ? " (interrupted by the guard alarm)" : "");
  tell_value(total);
  await_turn();
  free(buffer);
}

static void sndtimeo_peer(int fd) {
  unsigned long long total = await_value();
  struct drained outcome = drain_checking(fd, 30, total);
  say("drained_all=%s content_ok=%s", yes_no(outcome.total == total), yes_no(outcome.content_ok));
  tell();
}

/* A signal interrupts a blocking write into full buffers: the bytes taken so
 * far (or EINTR), at once. The peer reads nothing until then. */
#define INTERRUPTED_WRITE (16u << 20)

static void write_interrupted_subject(int fd) {
  unsigned char* data = pattern(INTERRUPTED_WRITE, 32);
  guard_begin(1);
  long long started = now_ms();
  ssize_t sent = write(fd, data, INTERRUPTED_WRITE);
  const char* outcome = sent > 0 && sent < (ssize_t)INTERRUPTED_WRITE ? "partial" : result(sent);
  long long waited = now_ms() - started;
  guard_end();
  say("write_16MiB=%s interrupted=%s returned_within_1s_of_the_signal=%s", outcome, yes_no(guard_fired),
      yes_no(waited < 2000));
  tell_value(sent > 0 ? (unsigned long long)sent : 0);
  await_turn();
  free(data);
}

static void write_interrupted_peer(int fd) {
  unsigned long long total = await_value();
  struct drained outcome = drain_checking(fd, 32, total);
  say("drained_all=%s content_ok=%s", yes_no(outcome.total == total), yes_no(outcome.content_ok));
  tell();
}

/* Both sides write first, then read: TCP buffers a write that fits in its
 * buffers, so neither waits for the other to read. */
#define CROSSED_BYTES (200u << 10)

static void crossed_writes(int fd, uint64_t mine, uint64_t theirs) {
  unsigned char* data = pattern(CROSSED_BYTES, mine);
  guard_begin(3);
  ssize_t sent = write(fd, data, CROSSED_BYTES);
  const char* outcome = result(sent);
  int interrupted = guard_fired;
  guard_end();
  say("write_200KiB_before_reading=%s interrupted=%s", outcome, yes_no(interrupted));
  struct drained got = drain_checking(fd, theirs, CROSSED_BYTES);
  say("then_read_all=%s content_ok=%s", yes_no(got.total == CROSSED_BYTES), yes_no(got.content_ok));
  free(data);
}

static void crossed_writes_subject(int fd) {
  tell();
  crossed_writes(fd, 33, 34);
}

static void crossed_writes_peer(int fd) {
  await_turn();
  crossed_writes(fd, 34, 33);
}

/* SO_RCVLOWAT: the socket is not readable (poll) until that many bytes are
 * there; then a read takes them all. (A blocking read's wait is left out: the
 * kernel's own wakeup is unreliable there, as its wait looks for a new tail
 * buffer and a small second segment may be merged into the old one.) */
static void rcvlowat_subject(int fd) {
  int lowat = 100;
  say("set_rcvlowat_100=%s", result(setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat))));
  tell();
  await_turn();
  say("fionread=%d", wait_readable(fd, 50));
  say("poll_with_50=%s", mask_text(poll_one(fd, POLLIN, 200)));
  tell();
  await_turn();
  say("fionread=%d", wait_readable(fd, 100));
  say("poll_with_100=%s", mask_text(poll_one(fd, POLLIN, 200)));
  unsigned char data[1000];
  ssize_t got = recv(fd, data, sizeof(data), 0);
  say("recv=%s crc=%08x", result(got), crc_of(data, got));
}

static void rcvlowat_peer(int fd) {
  await_turn();
  unsigned char* data = pattern(100, 31);
  say("write_50=%s", result(write_fully(fd, data, 50)));
  tell();
  await_turn();
  say("write_50=%s", result(write_fully(fd, data + 50, 50)));
  tell();
  free(data);
}

/* Urgent data: the last byte of a MSG_OOB send is out of band. */
static void oob_subject(int fd) {
  say("send_oob=%s", result(send(fd, "ab", 2, MSG_OOB)));
  tell();
}

static void oob_peer(int fd) {
  await_turn();
  say("poll=%s", mask_text(poll_until(fd, POLLPRI)));
  char data[10] = {0};
  ssize_t got = recv(fd, data, sizeof(data), MSG_OOB);
  say("recv_oob=%s byte=%c", result(got), got == 1 ? data[0] : '-');
  got = recv(fd, data, sizeof(data), MSG_DONTWAIT);
  say("recv_inline=%s bytes=%.*s", result(got), got > 0 ? (int)got : 0, data);
  say("recv_again=%s", result(recv(fd, data, sizeof(data), MSG_DONTWAIT)));
}

/* ------------------------------------------------------------------ table */

struct semantics_case {
  const char* name;
  void (*subject)(int fd);
  void (*peer)(int fd);
};

static const struct semantics_case kCases[] = {
    {"peek", peek_subject, peek_peer},
    {"peek_waitall", peek_waitall_subject, peek_waitall_peer},
    {"waitall", waitall_subject, waitall_peer},
    {"waitall_eof", waitall_eof_subject, waitall_eof_peer},
    {"dontwait_empty", dontwait_empty_subject, dontwait_empty_peer},
    {"nonblock_empty", nonblock_empty_subject, nonblock_empty_peer},
    {"nonblock_full", nonblock_full_subject, nonblock_full_peer},
    {"fionread", fionread_subject, fionread_peer},
    {"siocoutq", siocoutq_subject, siocoutq_peer},
    {"iov64", iov64_subject, iov64_peer},
    {"iov_limits", iov_limits_subject, iov_limits_peer},
    {"null_messages", null_messages_subject, null_messages_peer},
    {"sendmsg_recvmsg", sendmsg_recvmsg_subject, sendmsg_recvmsg_peer},
    {"msg_trunc", msg_trunc_subject, msg_trunc_peer},
    {"mmsg", mmsg_subject, mmsg_peer},
    {"recvmmsg_blocking", recvmmsg_blocking_subject, recvmmsg_blocking_peer},
    {"recvmmsg_eof", recvmmsg_eof_subject, recvmmsg_eof_peer},
    {"sendfile_splice", sendfile_splice_subject, sendfile_splice_peer},
    {"msg_more", msg_more_subject, msg_more_peer},
    {"msg_more_alone", msg_more_alone_subject, msg_more_alone_peer},
    {"shut_wr", shut_wr_subject, shut_wr_peer},
    {"shut_rd", shut_rd_subject, shut_rd_peer},
    {"shut_rdwr", shut_rdwr_subject, shut_rdwr_peer},
    {"epipe_sigpipe", epipe_sigpipe_subject, close_and_wait_peer},
    {"epipe_nosignal", epipe_nosignal_subject, close_and_wait_peer},
    {"close_unread", close_unread_subject, close_unread_peer},
    {"so_error_reset", so_error_reset_subject, close_unread_peer},
    {"close_unsent", close_unsent_subject, close_unsent_peer},
    {"close_unsent_alive", close_unsent_alive_subject, close_unsent_alive_peer},
    {"peer_exit", peer_exit_subject, peer_exit_peer},
    {"peer_exit_normal", peer_exit_subject, peer_exit_normal_peer},
    {"peer_kill", peer_kill_subject, peer_kill_peer},
    {"peer_exit_unread", peer_exit_unread_subject, peer_exit_unread_peer},
    {"poll_shutdown", poll_shutdown_subject, poll_shutdown_peer},
    {"poll_close", poll_close_subject, close_and_wait_peer},
    {"rcvtimeo", rcvtimeo_subject, rcvtimeo_peer},
    {"sndtimeo", sndtimeo_subject, sndtimeo_peer},
    {"rcvlowat", rcvlowat_subject, rcvlowat_peer},
    {"write_interrupted", write_interrupted_subject, write_interrupted_peer},
    {"crossed_writes", crossed_writes_subject, crossed_writes_peer},
    {"oob", oob_subject, oob_peer},
};
static const size_t kCaseCount = sizeof(kCases) / sizeof(kCases[0]);

/* ------------------------------------------------------------------ frame */

static void on_sigpipe(int signal_number) {
  (void)signal_number;
  sigpipes++;
}

static void on_alarm(int signal_number) {
  (void)signal_number;
  static const char subject_line[] = "TIMEOUT\n", peer_line[] = "peer: TIMEOUT\n";
  if (peer_side) {
    (void)!write(report_fd, peer_line, sizeof(peer_line) - 1);
  } else {
    (void)!write(STDOUT_FILENO, subject_line, sizeof(subject_line) - 1);
    end_peer_and_print_its_lines();
  }
  _exit(1);
}

/* Three 1-byte turns each way, the connecting side first; it pauses before its
 * later turns so that its upgrade agent has heard the server's "ready". */
static void warm_up(int fd, int connecting) {
  for (char turn = 0; turn < 3; ++turn) {
    char mine = (char)((connecting ? 'A' : 'a') + turn), theirs = (char)((connecting ? 'a' : 'A') + turn);
    char got = 0;
    if (connecting) {
      if (turn > 0) sleep_ms(20);
      if (write_all(fd, &mine, 1) != 0) internal_failure("warm-up write");
      if (read_exactly(fd, &got, 1) != 1 || got != theirs) internal_failure("warm-up read");
    } else {
      if (read_exactly(fd, &got, 1) != 1 || got != theirs) internal_failure("warm-up read");
      if (write_all(fd, &mine, 1) != 0) internal_failure("warm-up write");
    }
  }
}

static int connect_to(int port) {
  struct sockaddr_storage address;
  socklen_t length = loopback_address(&address, 0, port);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) internal_failure("socket");
  if (connect(fd, (struct sockaddr*)&address, length) != 0) internal_failure("connect");
  return fd;
}

static int accept_one(int listener) {
  int fd;
  while ((fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC)) < 0 && errno == EINTR) {
  }
  if (fd < 0) internal_failure("accept");
  return fd;
}

static const char* status_text(int status) {
  static char text[48];
  if (WIFEXITED(status))
    snprintf(text, sizeof(text), "exit %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(text, sizeof(text), "signal %s", WTERMSIG(status) == SIGKILL ? "KILL" : "other");
  else
    snprintf(text, sizeof(text), "unknown");
  return text;
}

int main(int argc, char** argv) {
  program_name = "socket_semantics";
  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (size_t index = 0; index < kCaseCount; ++index) printf("%s\n", kCases[index].name);
    return 0;
  }
  if (argc < 2 || argc > 3) die("usage: socket_semantics --list | CASE [accept|connect]");
  const struct semantics_case* chosen = NULL;
  for (size_t index = 0; index < kCaseCount; ++index)
    if (strcmp(argv[1], kCases[index].name) == 0) chosen = &kCases[index];
  if (chosen == NULL) die("unknown case '%s' (see --list)", argv[1]);
  int subject_connects = 0;
  if (argc == 3) {
    if (strcmp(argv[2], "connect") == 0)
      subject_connects = 1;
    else if (strcmp(argv[2], "accept") != 0)
      die("the subject's role is accept or connect, not '%s'", argv[2]);
  }

  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_handler = on_sigpipe;
  sigaction(SIGPIPE, &action, NULL);
  action.sa_handler = on_alarm;
  sigaction(SIGALRM, &action, NULL);

  peer_written = mmap(NULL, sizeof(*peer_written), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (peer_written == MAP_FAILED) die("mmap:");
  atomic_store(peer_written, 0);

  int listener = listen_loopback(0, 0);
  struct sockaddr_in bound;
  socklen_t length = sizeof(bound);
  if (getsockname(listener, (struct sockaddr*)&bound, &length) != 0) die("getsockname:");
  int port = ntohs(bound.sin_port);

  int to_peer[2], to_subject[2], report[2];
  if (pipe2(to_peer, O_CLOEXEC) != 0 || pipe2(to_subject, O_CLOEXEC) != 0 || pipe2(report, O_CLOEXEC) != 0)
    die("pipe:");
  say("case=%s", chosen->name);
  fflush(stdout);
  const pid_t subject_pid = getpid();
  peer_pid = fork();
  if (peer_pid < 0) die("fork:");
  if (peer_pid == 0) {
    peer_side = 1;
    peer_pid = -1;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != subject_pid) _exit(1);
    alarm(CASE_SECONDS);
    report_fd = report[1];
    control_out = to_subject[1];
    control_in = to_peer[0];
    close(report[0]);
    close(to_subject[0]);
    close(to_peer[1]);
    int peer_connects = !subject_connects;
    if (peer_connects) {
      close(listener);
      connection_fd = connect_to(port);
    } else {
      connection_fd = accept_one(listener);
      close(listener);
    }
    warm_up(connection_fd, peer_connects);
    chosen->peer(connection_fd);
    /* Nothing of ours may change what the subject observes: wait until it is done. */
    char done;
    while (read(control_in, &done, 1) < 0 && errno == EINTR) {
    }
    if (connection_fd >= 0) close_connection();
    _exit(0);
  }

  alarm(CASE_SECONDS);
  control_out = to_peer[1];
  control_in = to_subject[0];
  report_read_fd = report[0];
  close(report[1]);
  close(to_subject[1]);
  close(to_peer[0]);
  if (subject_connects) {
    close(listener);
    connection_fd = connect_to(port);
  } else {
    connection_fd = accept_one(listener);
    close(listener);
  }
  warm_up(connection_fd, subject_connects);
  chosen->subject(connection_fd);

  /* The subject is done: the peer may close and end (a dead peer's pipe
   * fails, harmlessly). The subject keeps its socket open until then. */
  (void)!write(control_out, "!", 1);
  if (!peer_reaped) {
    while (waitpid(peer_pid, &peer_status, 0) < 0) {
      if (errno != EINTR) internal_failure("waitpid");
    }
  }
  if (connection_fd >= 0) close_connection();
  char lines[8192];
  ssize_t got;
  while ((got = read(report[0], lines, sizeof(lines))) != 0) {
    if (got < 0) {
      if (errno == EINTR) continue;
      break;
    }
    write_all(STDOUT_FILENO, lines, (size_t)got);
  }
  say("peer_status=%s", status_text(peer_status));
  return 0;
}
