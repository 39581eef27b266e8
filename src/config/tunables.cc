#include "config/tunables.h"

namespace qpsock::config {

const char* same_host_name(SameHost same_host) {
  switch (same_host) {
    case SameHost::shm: return "shm";
    case SameHost::rdma: return "rdma";
    case SameHost::kernel: return "kernel";
  }
  return "?";
}

}  // namespace qpsock::config
