// One rule line of qpsock.conf: ACTION ROLE PEER [PORTS [LOCAL]].
#pragma once

#include <string>

#include "config/ip_network.h"
#include "config/port_set.h"

namespace qpsock::config {

enum class Action { offload, kernel };
// The role of a connection being decided: opened with connect, or accepted.
enum class Role { client, server };
// The roles a rule applies to.
enum class RuleRoles { client, server, both };

const char* action_name(Action action);
const char* role_name(Role role);

struct Rule {
  Action action = Action::offload;
  RuleRoles roles = RuleRoles::both;
  IpNetwork peer = IpNetwork::any();
  // Matched against the service port: the peer's port for a client, the
  // local (listening) port for a server.
  PortSet ports = PortSet::any();
  IpNetwork local = IpNetwork::any();
  // "FILE:LINE", reported as the reason of every decision the rule makes.
  std::string origin;

  bool matches(const IpEndpoint& local_endpoint, const IpEndpoint& peer_endpoint, Role role) const;
};

}  // namespace qpsock::config
