#include "sockets/connection_accounting.h"

#include <cstdio>

#include "common/errno_guard.h"
#include "config/config_loader.h"
#include "sockets/connection_policy.h"
#include "upgrade/socket_upgrade.h"

namespace qpsock::sockets {
namespace {

FdTable& table() { return FdTable::process_table(); }

// "rule 2 (/etc/qpsock.conf:7): kernel", or for a decision no rule made,
// "built-in default: offload", "QPSOCK_OFFLOAD=0: kernel" and the like.
void format_decision(const config::Decision& decision, char* text, size_t size) {
  const char* action = config::action_name(decision.action);
  const auto rules = config::process_config().rules();
  for (size_t index = 0; index < rules.size(); ++index) {
    // A rule's decision points at the rule's own origin string.
    if (rules[index].origin.data() == decision.reason.data()) {
      snprintf(text, size, "rule %zu (%s): %s", index + 1, rules[index].origin.c_str(), action);
      return;
    }
  }
  snprintf(text, size, "%.*s: %s", static_cast<int>(decision.reason.size()), decision.reason.data(),
           action);
}

// The same, remembered per thread for the decision it last described: a
// process's connections mostly share one (the process's config lives as
// long as it, so its reasons never move).
struct DescribedDecision {
  const char* reason;
  size_t reason_size;
  config::Action action;
  char text[sizeof(stats::format::Slot::decision)];
};
constinit __attribute__((tls_model("initial-exec"))) thread_local DescribedDecision last_described{};

const char* describe_decision(const config::Decision& decision) {
  DescribedDecision& last = last_described;
  if (last.reason != decision.reason.data() || last.reason_size != decision.reason.size() ||
      last.action != decision.action || last.text[0] == '\0') {
    format_decision(decision, last.text, sizeof(last.text));
    last.reason = decision.reason.data();
    last.reason_size = decision.reason.size();
    last.action = decision.action;
  }
  return last.text;
}

// Replaces fd's handle; the one it replaces loses this fd's reference.
void install_handle(int fd, stats::Handle handle) {
  if (const stats::Handle previous = table().exchange_stats_handle(fd, handle))
    stats::close_connection(previous);
}

}  // namespace

void record_connection(int fd, config::Role role, const config::Decision& decision,
                       const ConnectionEndpoints& endpoints) {
  ErrnoGuard errno_guard;
  const char* const decision_text = describe_decision(decision);
  const bool offload = decision.action == config::Action::offload;
  const stats::Handle handle = stats::open_connection(
      reinterpret_cast<const sockaddr*>(&endpoints.local),
      reinterpret_cast<const sockaddr*>(&endpoints.peer),
      role == config::Role::client ? stats::Role::client : stats::Role::server,
      offload ? stats::Path::pending : stats::Path::kernel, decision_text,
      offload ? "upgrade pending" : decision_text);
  install_handle(fd, handle);
  upgrade::attach_statistics(fd, handle);
}

void record_fd_copy(int source, int destination) {
  const stats::Handle handle = connection_stats_handle(source);
  if (handle != 0) stats::add_reference(handle);
  install_handle(destination, handle);
}

void record_fd_close(int fd) { install_handle(fd, 0); }

void count_kernel_bytes(stats::Handle handle, stats::Direction direction, uint64_t bytes) {
  stats::Registry& registry = stats::process_registry();
  stats::format::Slot* slot = registry.find(handle);
  if (slot == nullptr) return;
  // A connection the config wanted offloaded whose bytes go straight to the
  // kernel: no upgrade is under way (the upgrade code routes those through
  // its Connection), so it stays on TCP.
  if (slot->path.load(std::memory_order_relaxed) == static_cast<uint8_t>(stats::Path::pending)) {
    registry.settle_pending(handle, stats::Path::kernel,
                            "not upgraded: the peer does not run qpsock, or the upgrade was declined");
  }
  slot->bytes[static_cast<int>(direction)][stats::format::kTcp].fetch_add(bytes, std::memory_order_relaxed);
}

int count_messages(int fd, int result, const mmsghdr* messages, stats::Direction direction, int flags) {
  if (result <= 0 || (direction == stats::Direction::received && (flags & MSG_PEEK) != 0)) return result;
  const stats::Handle handle = connection_stats_handle(fd);
  if (handle == 0) return result;
  uint64_t bytes = 0;
  for (int index = 0; index < result; ++index) bytes += messages[index].msg_len;
  count_kernel_bytes(handle, direction, bytes);
  return result;
}

}  // namespace qpsock::sockets
