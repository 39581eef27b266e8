#include "config/config.h"

namespace qpsock::config {
namespace {

constexpr std::string_view kBuiltInDefault = "built-in default";

}  // namespace

Config::Config() : fallback_reason_(kBuiltInDefault), source_(kBuiltInDefault) {}

void Config::set_fallback(Action action, std::string reason) {
  fallback_action_ = action;
  fallback_reason_ = std::move(reason);
}

Decision Config::decide(const sockaddr* local, const sockaddr* peer, Role role) const {
  if (offload_disabled_) return {Action::kernel, "QPSOCK_OFFLOAD=0"};
  auto local_endpoint = endpoint_from_sockaddr(local);
  auto peer_endpoint = endpoint_from_sockaddr(peer);
  if (!local_endpoint || !peer_endpoint) return {Action::kernel, "not an IP address"};
  for (const Rule& rule : rules_) {
    if (rule.matches(*local_endpoint, *peer_endpoint, role)) return {rule.action, rule.origin};
  }
  return {fallback_action_, fallback_reason_};
}

}  // namespace qpsock::config
