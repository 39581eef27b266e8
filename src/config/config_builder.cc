#include "config/config_builder.h"

#include <algorithm>

#include "config/config_text.h"
#include "config/value_syntax.h"

namespace qpsock::config {
namespace {

// A binary file given as the config would otherwise print one message per
// "line" into the program's stderr.
constexpr size_t kMostDiagnostics = 100;

}  // namespace

void ConfigBuilder::use_file(std::string_view file_name) {
  source_ = Source::file;
  file_name_ = file_name;
  config_.set_source(std::string(file_name));
}

void ConfigBuilder::use_unreadable_file(std::string_view file_name, std::string_view why) {
  source_ = Source::unreadable_file;
  file_name_ = file_name;
  config_.set_source("cannot read " + std::string(file_name));
  report("cannot read config " + std::string(file_name) + ": " + std::string(why) +
         "; every connection stays on the kernel");
}

void ConfigBuilder::report(std::string diagnostic) {
  if (diagnostics_.size() < kMostDiagnostics) {
    diagnostics_.push_back(std::move(diagnostic));
  } else {
    ++suppressed_diagnostics_;
  }
}

std::string ConfigBuilder::message_prefix(const TunableDescription& tunable,
                                          const TunableOrigin& origin) {
  if (origin.from_environment) return origin.origin;
  return origin.origin + ": " + std::string(tunable.name);
}

void ConfigBuilder::set_tunable_from_file(const TunableDescription& tunable,
                                          std::string_view value, std::string_view file_name,
                                          size_t line_number) {
  set_tunable(tunable, value, {std::string(file_name) + ":" + decimal(line_number), false});
}

void ConfigBuilder::set_tunable_from_environment(const TunableDescription& tunable,
                                                 std::string_view value) {
  set_tunable(tunable, value, {tunable.environment_name, true});
}

void ConfigBuilder::set_tunable(const TunableDescription& tunable, std::string_view value,
                                TunableOrigin origin) {
  TunableOrigin& current = tunable_origins_[tunable_index(tunable)];
  std::string prefix = message_prefix(tunable, origin);
  std::string problem = value.empty() ? std::string("missing value")
                                      : tunable.assign(value, tunables_);
  if (!problem.empty()) {
    std::string kept = tunable.current_value(tunables_);
    if (current.origin.empty()) {
      kept = "default " + kept;
    } else {
      kept += " from " + current.origin;
    }
    report(prefix + ": " + problem + "; " + kept + " kept");
    return;
  }
  // Within one file a second setting is usually a forgotten first one; an
  // environment override is deliberate and needs no remark.
  if (!origin.from_environment && !current.origin.empty() && !current.from_environment) {
    report(origin.origin + ": " + std::string(tunable.name) + " set again (previously at " +
           current.origin + "); this value wins");
  }
  current = std::move(origin);
}

void ConfigBuilder::check_eager_chunk_fits_ring() {
  uint64_t largest = tunables_.ring_size / 2;
  if (tunables_.eager_chunk <= largest) return;
  const TunableDescription& eager_chunk = *find_tunable("eager_chunk");
  const TunableOrigin& origin = tunable_origins_[tunable_index(eager_chunk)];
  uint64_t chosen = std::min(Tunables{}.eager_chunk, largest);
  // The default chunk only fails to fit a deliberately small ring: quietly
  // take the most the ring allows.
  if (!origin.origin.empty()) {
    std::string replacement = format_size(chosen);
    if (chosen == Tunables{}.eager_chunk) {
      replacement = "default " + replacement;
    } else {
      replacement += " (half of ring_size)";
    }
    report(message_prefix(eager_chunk, origin) + ": " + format_size(tunables_.eager_chunk) +
           " is more than half of ring_size " + format_size(tunables_.ring_size) + "; " +
           replacement + " used");
  }
  tunables_.eager_chunk = chosen;
}

void ConfigBuilder::check_upgrade_delay_within_timeout(const char* name,
                                                      std::chrono::microseconds& delay) {
  // The client's offer lasts upgrade_timeout from its connect: a server that
  // waits as long finds it gone, and no connection would be upgraded.
  if (delay < tunables_.upgrade_timeout) return;
  const TunableDescription& description = *find_tunable(name);
  const TunableOrigin& origin = tunable_origins_[tunable_index(description)];
  const auto chosen = tunables_.upgrade_timeout / 2;
  // The default delay only fails to fit a deliberately short timeout.
  if (!origin.origin.empty())
    report(message_prefix(description, origin) + ": " + format_duration(delay) +
           " is not shorter than upgrade_timeout " + format_duration(tunables_.upgrade_timeout) +
           ", whose end no upgrade would meet; " + format_duration(chosen) +
           " (half of upgrade_timeout) used");
  delay = chosen;
}

ParseResult ConfigBuilder::finish() && {
  check_eager_chunk_fits_ring();
  check_upgrade_delay_within_timeout("rdma_upgrade_delay", tunables_.rdma_upgrade_delay);
  check_upgrade_delay_within_timeout("shm_upgrade_delay", tunables_.shm_upgrade_delay);
  config_.set_tunables(tunables_);
  switch (source_) {
    case Source::built_in:
      break;  // Config starts out as the built-in policy
    case Source::file:
      // A file of tunables alone keeps the built-in policy; a file with rules
      // is the whole policy.
      if (saw_rule_line_) config_.set_fallback(Action::kernel, "no rule matched");
      break;
    case Source::unreadable_file:
      config_.set_fallback(Action::kernel, "cannot read " + file_name_);
      break;
  }
  if (suppressed_diagnostics_ > 0) {
    diagnostics_.push_back((file_name_.empty() ? std::string("qpsock.conf") : file_name_) +
                           ": " + decimal(suppressed_diagnostics_) +
                           " more problems not reported");
  }
  return {std::move(config_), std::move(diagnostics_)};
}

}  // namespace qpsock::config
