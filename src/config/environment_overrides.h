// QPSOCK_* environment variables that override the config file: one per
// tunable (same value syntax), and QPSOCK_OFFLOAD=0 to turn offload off.
#pragma once

#include <functional>

#include "config/config_builder.h"

namespace qpsock::config {

// getenv, or a stand-in (tests, the fuzzer).
using EnvironmentLookup = std::function<const char*(const char*)>;

// Applies every set, non-empty override to `builder`; bad values are
// reported as "QPSOCK_X: what is wrong" and ignored.
void apply_environment_overrides(const EnvironmentLookup& getenv_function,
                                 ConfigBuilder& builder);

}  // namespace qpsock::config
