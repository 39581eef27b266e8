#include "config/rule.h"

namespace qpsock::config {

const char* action_name(Action action) { return action == Action::offload ? "offload" : "kernel"; }

const char* role_name(Role role) { return role == Role::client ? "client" : "server"; }

bool Rule::matches(const IpEndpoint& local_endpoint, const IpEndpoint& peer_endpoint,
                   Role role) const {
  if (roles == RuleRoles::client && role != Role::client) return false;
  if (roles == RuleRoles::server && role != Role::server) return false;
  uint16_t service_port = role == Role::client ? peer_endpoint.port : local_endpoint.port;
  return peer.contains(peer_endpoint.address) && ports.contains(service_port) &&
         local.contains(local_endpoint.address);
}

}  // namespace qpsock::config
