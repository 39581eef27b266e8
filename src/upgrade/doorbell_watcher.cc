#include "upgrade/doorbell_watcher.h"

#include <sys/epoll.h>

#include <cstring>
#include <memory>

#include "common/background_loop.h"
#include "common/errno_guard.h"
#include "common/log.h"
#include "upgrade/connection.h"
#include "upgrade/connection_registry.h"

namespace qpsock::upgrade {
namespace {

// The tag is the fd: looked up again, a closed fd finds nothing or another
// connection, which at worst polls its stream once more and does no harm.
void answer_doorbell(uint64_t tag, uint32_t /*events*/) {
  const std::shared_ptr<Connection> connection = find_connection(static_cast<int>(tag));
  if (connection != nullptr) connection->answer_doorbell();
}

}  // namespace

void watch_for_doorbells(KeptFd tcp) {
  ErrnoGuard errno_guard;
  // The loop's lock is held across fork and a use must never wait for a
  // lock: the loop learns the callback first, and the watch under the use
  // then takes no lock.
  int error = prepare_background_callback(&answer_doorbell);
  const FdUse use(tcp);
  if (!use) return;  // closed: nothing left to watch
  // Edge-triggered: a FIN leaves the socket readable for good, and must not
  // keep the thread awake. A closed fd leaves the set with its socket.
  if (error == 0)
    error = watch_in_background(use.fd(), EPOLLIN | EPOLLRDHUP | EPOLLET, &answer_doorbell,
                                static_cast<uint64_t>(use.fd()));
  if (error < 0)
    QPSOCK_LOG(warn, "fd %d: cannot watch for the peer's doorbell (%s): its cancels wait for "
               "this program's next call on the socket", use.fd(), strerrordesc_np(-error));
}

}  // namespace qpsock::upgrade
