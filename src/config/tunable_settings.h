// The catalogue of tunables: each one's name in the file, its environment
// override, and how a value is parsed and range-checked. The file parser and
// the environment overrides both go through here, so they accept exactly the
// same values and say the same things about bad ones.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "config/tunables.h"

namespace qpsock::config {

struct TunableDescription {
  std::string_view name;         // as written in qpsock.conf
  const char* environment_name;  // QPSOCK_...
  // Parses and range-checks `value`; on success stores it and returns an
  // empty string, else leaves `tunables` alone and returns why, as a phrase
  // such as "'10' is below the minimum 1K".
  std::string (*assign)(std::string_view value, Tunables& tunables);
  // The current value, spelled as the file would spell it.
  std::string (*current_value)(const Tunables& tunables);
};

inline constexpr size_t kTunableCount = 13;

std::span<const TunableDescription, kTunableCount> all_tunables();
const TunableDescription* find_tunable(std::string_view name);
// Index of `description` within all_tunables().
size_t tunable_index(const TunableDescription& description);
// The tunable a misspelled name most likely meant (at most two edits away).
std::optional<std::string_view> closest_tunable_name(std::string_view misspelled);

}  // namespace qpsock::config
