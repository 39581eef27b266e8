// Where the process's config comes from: QPSOCK_CONF, else /etc/qpsock.conf,
// else the built-in policy; then the QPSOCK_* overrides.
#pragma once

#include <string_view>

#include "config/config.h"
#include "config/config_builder.h"
#include "config/environment_overrides.h"

namespace qpsock::config {

inline constexpr std::string_view kSystemConfigPath = "/etc/qpsock.conf";

// QPSOCK_CONF (looked up through getenv_function):
//   unset or empty  system_config_path if it exists, else the built-in policy;
//   none            the built-in policy, no file;
//   a path          that file. If it (or an existing system_config_path)
//                   cannot be read, every connection stays on the kernel.
// Then the environment overrides. Nothing is logged: the diagnostics are returned.
ParseResult load_config(const EnvironmentLookup& getenv_function,
                        std::string_view system_config_path = kSystemConfigPath);

// The process's config, loaded on first use (thread-safe) with the real
// environment; each diagnostic is logged once as a warning.
const Config& process_config();

}  // namespace qpsock::config
