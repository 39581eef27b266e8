// Assembles a Config from its sources in order (the file's lines, then the
// environment overrides) and collects what was wrong with them. The checks
// that need every source applied (eager_chunk against ring_size, what happens
// when no rule matches) run in finish().
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "config/tunable_settings.h"

namespace qpsock::config {

struct ParseResult {
  Config config;
  // Each already formatted "FILE:LINE: message", "QPSOCK_X: message" or
  // "cannot read config FILE: why; ...".
  std::vector<std::string> diagnostics;
};

class ConfigBuilder {
 public:
  // The policy comes from this file's lines (the default is the built-in policy).
  void use_file(std::string_view file_name);
  // The user named a policy that cannot be read: report it and keep every
  // connection on the kernel rather than guess.
  void use_unreadable_file(std::string_view file_name, std::string_view why);

  void add_rule(Rule rule) { config_.add_rule(std::move(rule)); }
  // A line that is, or may have been, a rule, even if it was rejected: once a
  // file has one, traffic no rule matches stays on the kernel.
  void note_rule_line() { saw_rule_line_ = true; }
  void report(std::string diagnostic);

  void set_tunable_from_file(const TunableDescription& tunable, std::string_view value,
                             std::string_view file_name, size_t line_number);
  void set_tunable_from_environment(const TunableDescription& tunable, std::string_view value);
  void disable_offload() { config_.disable_offload(); }

  ParseResult finish() &&;

 private:
  enum class Source { built_in, file, unreadable_file };
  // Where a tunable got its current value; empty origin: the default.
  struct TunableOrigin {
    std::string origin;  // "FILE:LINE" or "QPSOCK_X"
    bool from_environment = false;
  };

  // The prefix of a message about `tunable` as set from `origin`.
  static std::string message_prefix(const TunableDescription& tunable, const TunableOrigin& origin);
  void set_tunable(const TunableDescription& tunable, std::string_view value,
                   TunableOrigin origin);
  void check_eager_chunk_fits_ring();
  // A server delay (`name`, the tunable `delay`) no shorter than
  // upgrade_timeout is reported if the user set it, and halved.
  void check_upgrade_delay_within_timeout(const char* name, std::chrono::microseconds& delay);

  Config config_;
  Tunables tunables_;
  std::array<TunableOrigin, kTunableCount> tunable_origins_;
  std::vector<std::string> diagnostics_;
  size_t suppressed_diagnostics_ = 0;
  Source source_ = Source::built_in;
  std::string file_name_;
  bool saw_rule_line_ = false;
};

}  // namespace qpsock::config
