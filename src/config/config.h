// The loaded policy: which connections qpsock tries to upgrade, and the
// engine's tunables. Built by the parser (config_parser.h) or the loader
// (config_loader.h); read-only afterwards, so any thread may query it.
#pragma once

#include <sys/socket.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/rule.h"
#include "config/tunables.h"

namespace qpsock::config {

struct Decision {
  Action action;
  // Why: "/etc/qpsock.conf:3" (the rule that matched), "built-in default",
  // "no rule matched", "QPSOCK_OFFLOAD=0", "not an IP address",
  // "cannot read FILE", or "config loading" (asked from inside the loading
  // itself, see config_loader.cc). Points into the Config (or at a literal): valid while
  // the Config that decided lives and is not moved.
  std::string_view reason;
};

class Config {
 public:
  // What applies when there is no config file: offload both any *.
  Config();

  // local and peer: a sockaddr_in or sockaddr_in6 each (IPv4-mapped IPv6
  // addresses count as IPv4). Anything else, or null: kernel, "not an IP address".
  Decision decide(const sockaddr* local, const sockaddr* peer, Role role) const;
  const Tunables& tunables() const { return tunables_; }
  std::span<const Rule> rules() const { return rules_; }
  // Where the policy came from: a file name, "built-in default", or
  // "cannot read FILE" (for qpsock-stat and debugging).
  std::string_view source() const { return source_; }
  bool offload_disabled() const { return offload_disabled_; }
  // Whether a client's decision depends on its local address: some rule for
  // clients names a local network. Otherwise any local address decides alike.
  bool client_decisions_read_local_address() const { return client_rules_name_local_; }

  // Building (the parser and the loader).
  void add_rule(Rule rule) {
    if (rule.roles != RuleRoles::server && !rule.local.matches_everything()) client_rules_name_local_ = true;
    rules_.push_back(std::move(rule));
  }
  // The decision when no rule matches, with its reason.
  void set_fallback(Action action, std::string reason);
  void set_source(std::string source) { source_ = std::move(source); }
  void set_tunables(const Tunables& tunables) { tunables_ = tunables; }
  void disable_offload() { offload_disabled_ = true; }

 private:
  std::vector<Rule> rules_;
  Action fallback_action_ = Action::offload;
  std::string fallback_reason_;
  std::string source_;
  Tunables tunables_;
  bool offload_disabled_ = false;
  bool client_rules_name_local_ = false;
};

}  // namespace qpsock::config
