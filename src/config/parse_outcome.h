// The result of parsing one piece of configuration text: a value, or the
// reason it was rejected. The library must never throw inside a host program,
// so every parser reports failure through this instead.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace qpsock::config {

template <typename Value>
struct ParseOutcome {
  std::optional<Value> value;
  std::string error;  // set exactly when value is empty

  static ParseOutcome success(Value parsed) { return {std::move(parsed), {}}; }
  static ParseOutcome failure(std::string why) { return {std::nullopt, std::move(why)}; }
  bool ok() const { return value.has_value(); }
};

}  // namespace qpsock::config
