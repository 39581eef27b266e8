#include "upgrade/socket_identity.h"

#include <dirent.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/own_descriptor.h"
#include "libc/next_symbols.h"
#include "upgrade/connection_registry.h"

namespace qpsock::upgrade {
namespace {

void fill_endpoint(const sockaddr_storage& address, __be16& port, __be32* words) {
  if (address.ss_family == AF_INET) {
    const auto& ipv4 = reinterpret_cast<const sockaddr_in&>(address);
    port = ipv4.sin_port;
    memcpy(words, &ipv4.sin_addr, sizeof(ipv4.sin_addr));
  } else {
    const auto& ipv6 = reinterpret_cast<const sockaddr_in6&>(address);
    port = ipv6.sin6_port;
    memcpy(words, &ipv6.sin6_addr, sizeof(ipv6.sin6_addr));
  }
}

// Closes the netlink socket on every path.
class NetlinkSocket {
 public:
  NetlinkSocket() : fd_(next::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG)) {}
  ~NetlinkSocket() {
    if (fd_ >= 0) close_descriptor(fd_);
  }
  NetlinkSocket(const NetlinkSocket&) = delete;
  NetlinkSocket& operator=(const NetlinkSocket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

int find_tcp_socket_inode(const sockaddr_storage& local, const sockaddr_storage& remote,
                          uint64_t& inode) {
  if (local.ss_family != remote.ss_family ||
      (local.ss_family != AF_INET && local.ss_family != AF_INET6))
    return -EAFNOSUPPORT;
  NetlinkSocket netlink;
  if (netlink.fd() < 0) return -errno;
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } message{};
  message.header.nlmsg_len = sizeof(message);
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST;
  message.request.sdiag_family = static_cast<__u8>(local.ss_family);
  message.request.sdiag_protocol = IPPROTO_TCP;
  message.request.idiag_states = ~0u;
  fill_endpoint(local, message.request.id.idiag_sport, message.request.id.idiag_src);
  fill_endpoint(remote, message.request.id.idiag_dport, message.request.id.idiag_dst);
  message.request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  message.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (next::sendto(netlink.fd(), &message, sizeof(message), 0,
                   reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0)
    return -errno;
  alignas(nlmsghdr) char reply[1024];
  const ssize_t got = next::recv(netlink.fd(), reply, sizeof(reply), 0);
  if (got < 0) return -errno;
  auto* header = reinterpret_cast<nlmsghdr*>(reply);
  if (!NLMSG_OK(header, static_cast<size_t>(got))) return -EPROTO;
  if (header->nlmsg_type == NLMSG_ERROR) {
    auto* error = static_cast<nlmsgerr*>(NLMSG_DATA(header));
    return error->error < 0 ? error->error : -ENOENT;
  }
  if (header->nlmsg_type != SOCK_DIAG_BY_FAMILY) return -EPROTO;
  auto* found = static_cast<inet_diag_msg*>(NLMSG_DATA(header));
  // No inode: no process holds the socket any more (closed, or in TIME_WAIT).
  if (found->idiag_inode == 0) return -EPIPE;
  inode = found->idiag_inode;
  return 0;
}

int socket_inode_of_fd(int fd, uint64_t& inode) {
  struct stat status {};
  if (fstat(fd, &status) != 0) return -errno;
  if (!S_ISSOCK(status.st_mode)) return -ENOTSOCK;
  inode = status.st_ino;
  return 0;
}

int connection_socket_inode(int fd, const Connection& connection, uint64_t& inode) {
  if (find_connection(fd).get() != &connection) return -ENOTCONN;
  uint64_t read = 0;
  if (const int error = socket_inode_of_fd(fd, read); error < 0) return error;
  if (find_connection(fd).get() != &connection) return -ENOTCONN;
  inode = read;
  return 0;
}

namespace {

bool names_socket(int fd, uint64_t socket_inode) {
  uint64_t inode = 0;
  return socket_inode_of_fd(fd, inode) == 0 && inode == socket_inode;
}

}  // namespace

KeptFd kept_socket_fd(const Connection& connection, int offered_fd, uint64_t socket_inode) {
  if (offered_fd >= 0) {
    const KeptFd offered = keep_fd(offered_fd);
    if (find_connection(offered_fd).get() == &connection && names_socket(offered_fd, socket_inode))
      return offered;
  }
  // Every fd of the connection, lowest first: the registry follows a dup2
  // only after its system call, so a number it still gives may already name
  // another file.
  KeptFd found;
  visit_connections([&](int fd, Connection& attached) {
    if (!found.empty() || &attached != &connection) return;
    const KeptFd candidate = keep_fd(fd);
    if (names_socket(fd, socket_inode)) found = candidate;
  });
  return found;
}

int read_socket(const Connection& connection, int offered_fd, uint64_t socket_inode,
                stream::FunctionRef<int(int fd)> read, KeptFd& socket) {
  // A few tries: a program's moves are far apart next to a lookup.
  for (int attempt = 0; attempt < kSocketReadAttempts; ++attempt) {
    const KeptFd kept = kept_socket_fd(connection, offered_fd, socket_inode);
    if (kept.empty()) return -ENOTCONN;
    const FdUse use(kept);
    if (!use) continue;
    const int result = read(use.fd());
    if (names_socket(use.fd(), socket_inode)) {
      socket = kept;
      return result;
    }
  }
  return -ENOTCONN;
}

bool process_holds_socket(pid_t pid, uint64_t inode, int likely_fd) {
  char wanted[48];
  const int wanted_length =
      snprintf(wanted, sizeof(wanted), "socket:[%llu]", static_cast<unsigned long long>(inode));
  const auto is_wanted = [&](const char* target, ssize_t length) {
    return length == wanted_length && memcmp(target, wanted, static_cast<size_t>(length)) == 0;
  };
  if (likely_fd >= 0) {
    char link_path[64];
    snprintf(link_path, sizeof(link_path), "/proc/%d/fd/%d", static_cast<int>(pid), likely_fd);
    char target[64];
    if (is_wanted(target, readlink(link_path, target, sizeof(target)))) return true;
  }
  char directory_path[64];
  snprintf(directory_path, sizeof(directory_path), "/proc/%d/fd", static_cast<int>(pid));
  DIR* directory = opendir(directory_path);
  if (directory == nullptr) return false;
  bool holds = false;
  while (dirent* entry = readdir(directory)) {
    if (entry->d_name[0] == '.') continue;
    char target[64];
    if (is_wanted(target, readlinkat(dirfd(directory), entry->d_name, target, sizeof(target)))) {
      holds = true;
      break;
    }
  }
  closedir(directory);
  return holds;
}



}  // namespace qpsock::upgrade
