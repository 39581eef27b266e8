// The stream settings of one upgraded socket, whichever transport carries it.
#pragma once

#include "stream/stream_settings.h"

namespace qpsock::upgrade {

// The configuration's settings, narrowed or widened by the SO_RCVBUF and
// SO_SNDBUF the application set on the socket (as TCP honours them): the
// receive ring holds what the kernel would buffer, the send window bounds
// what may be written and not yet read.
stream::StreamSettings stream_settings_for_socket(int tcp_fd);

}  // namespace qpsock::upgrade
