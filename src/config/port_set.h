// The PORTS field of a rule: any port, or a list of ports and ranges.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/parse_outcome.h"

namespace qpsock::config {

struct PortRange {
  uint16_t first;
  uint16_t last;  // inclusive
};

class PortSet {
 public:
  static PortSet any();
  // "*", "any", "N", "N-M", or a comma list of N and N-M (no spaces).
  static ParseOutcome<PortSet> parse(std::string_view text);

  bool contains(uint16_t port) const;
  bool matches_everything() const { return ranges_.empty(); }
  // Canonical spelling: "*" or "80,5000-5999".
  std::string to_string() const;

 private:
  std::vector<PortRange> ranges_;  // empty: every port
};

}  // namespace qpsock::config
