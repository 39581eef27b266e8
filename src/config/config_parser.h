// The qpsock.conf syntax (qpsock.conf(5)): rule lines and tunable lines.
// Never fails as a whole: a bad line is reported with FILE:LINE and ignored,
// and every other line still applies.
#pragma once

#include <string_view>

#include "config/config_builder.h"

namespace qpsock::config {

// Lines longer than this are rejected whole; a real config line is far shorter.
inline constexpr size_t kLongestLine = 4096;

// The policy and tunables of `text`, as if read from a file called `file_name`
// (used in diagnostics and decision reasons). No environment overrides.
ParseResult parse_config_text(std::string_view text, std::string_view file_name);

// Feeds every line of `text` to `builder` (the builder must be use_file'd).
void parse_config_lines(std::string_view text, std::string_view file_name,
                        ConfigBuilder& builder);

}  // namespace qpsock::config
