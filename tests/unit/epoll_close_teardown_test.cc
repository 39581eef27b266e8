// A program that closes an upgraded socket still registered in its epoll set
// (ab at its end, nginx for every connection: the kernel drops the
// registration at close) leaves the set holding the connection's last
// reference. Tearing the connection down closes fds of its own: over RDMA,
// libibverbs closes the completion channel with close(2), which is qpsock's
// close and looks in the epoll sets again. The set must not tear it down
// under its lock (ab -k over Soft-RoCE hung there at exit, deadlocked on
// itself).
#include <gtest/gtest.h>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <memory>
#include <utility>

#include "readiness/upgraded_epoll.h"
#include "stream/loopback_stream_pair.h"
#include "upgrade/connection_registry.h"

namespace qpsock::readiness {
namespace {

// A loopback transport whose teardown closes an fd through qpsock's close
// path, as libibverbs' ibv_destroy_comp_channel does.
class TransportClosingAnFdAtTeardown final : public stream::Transport {
 public:
  TransportClosingAnFdAtTeardown(std::unique_ptr<stream::LoopbackTransport> inner, int own_fd)
      : inner_(std::move(inner)), own_fd_(own_fd) {}
  ~TransportClosingAnFdAtTeardown() override {
    fd_closing(own_fd_);
    close(own_fd_);
  }

  int register_memory(void* address, size_t length, stream::MemoryAccess access,
                      std::unique_ptr<stream::MemoryRegistration>& registration) override {
    return inner_->register_memory(address, length, access, registration);
  }
  int post_write(std::span<const stream::LocalSlice> source, stream::RemoteRegion destination,
                 std::optional<uint32_t> immediate, uint64_t cookie) override {
    return inner_->post_write(source, destination, immediate, cookie);
  }
  int post_read(std::span<const stream::LocalSlice> destination, stream::RemoteRegion source,
                uint64_t cookie) override {
    return inner_->post_read(destination, source, cookie);
  }
  int poll(std::span<stream::Completion> completions) override { return inner_->poll(completions); }
  int wait_handle() const override { return inner_->wait_handle(); }
  int arm() override { return inner_->arm(); }
  void disconnect() override { inner_->disconnect(); }
  size_t max_inline() const override { return inner_->max_inline(); }
  uint32_t max_outstanding_reads() const override { return inner_->max_outstanding_reads(); }
  uint32_t send_queue_depth() const override { return inner_->send_queue_depth(); }
  uint32_t notification_capacity() const override { return inner_->notification_capacity(); }
  uint32_t max_slices() const override { return inner_->max_slices(); }

 private:
  std::unique_ptr<stream::LoopbackTransport> inner_;
  int own_fd_;
};

// In a child process (a deadlock must not take the test binary with it):
// upgrade one end of a socket pair over that transport, watch it in an epoll
// set, drop every reference but the set's, and close the socket. 0 once the
// close returned.
int close_while_watched() {
  std::unique_ptr<stream::LoopbackTransport> first;
  std::unique_ptr<stream::LoopbackTransport> second;
  if (stream::LoopbackTransport::make_pair({}, first, second) < 0) return 2;
  const int own_fd = eventfd(0, EFD_CLOEXEC);
  if (own_fd < 0) return 2;
  std::unique_ptr<stream::Stream> ours;
  std::unique_ptr<stream::Stream> peers;
  if (stream::Stream::create(std::make_unique<TransportClosingAnFdAtTeardown>(std::move(first), own_fd),
                             {}, nullptr, ours) < 0 ||
      stream::Stream::create(std::move(second), {}, nullptr, peers) < 0 ||
      stream::connect_streams(*ours, *peers) < 0)
    return 2;
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) < 0) return 2;
  auto connection = std::make_shared<upgrade::Connection>(config::Role::client);
  connection->install(std::move(ours), upgrade::BindingToken{}, keep_fd(sockets[0]), stats::Path::shm);
  upgrade::attach_connection(sockets[0], connection);

  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) return 2;
  epoll_created(epoll_fd);
  epoll_event event{};
  event.events = EPOLLIN;
  if (epoll_control(epoll_fd, EPOLL_CTL_ADD, sockets[0], &event) != 0) return 3;
  connection.reset();

  // What qpsock's close does, in its order.
  upgrade::detach_connection(sockets[0]);
  fd_closing(sockets[0]);
  close(sockets[0]);
  return 0;
}

TEST(EpollCloseTeardown, ClosingASocketStillInAnEpollSetTearsItsConnectionDownOutsideTheSetsLock) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(10);  // a deadlock ends the child with SIGALRM
    _exit(close_while_watched());
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_FALSE(WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
      << "the close deadlocked: the connection was torn down under the epoll set's lock";
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: setting up failed; 3: epoll_ctl failed";
}

}  // namespace
}  // namespace qpsock::readiness
