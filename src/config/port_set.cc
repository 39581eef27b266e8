#include "config/port_set.h"

#include "config/config_text.h"
#include "config/value_syntax.h"

namespace qpsock::config {
namespace {

constexpr uint64_t kHighestPort = 65535;

ParseOutcome<uint16_t> parse_port(std::string_view text) {
  using Outcome = ParseOutcome<uint16_t>;
  if (text.empty()) return Outcome::failure("a port number is missing");
  auto number = parse_unsigned(text);
  bool all_digits = text.find_first_not_of("0123456789") == std::string_view::npos;
  if (!number.ok() && !all_digits) {
    return Outcome::failure(quote_for_message(text) + " is not a port number");
  }
  // Port 0 never names a service: a rule that mentions it is a mistake.
  if (number.ok() && *number.value == 0) return Outcome::failure("port 0 is not a valid port");
  if (!number.ok() || *number.value > kHighestPort) {
    return Outcome::failure("port " + quote_for_message(text) + " is above 65535");
  }
  return Outcome::success(static_cast<uint16_t>(*number.value));
}

ParseOutcome<PortRange> parse_range(std::string_view text) {
  using Outcome = ParseOutcome<PortRange>;
  if (text == "*" || text == "any") {
    return Outcome::failure(quote_for_message(text) + " cannot be part of a list");
  }
  size_t dash = text.find('-');
  if (dash == std::string_view::npos) {
    auto port = parse_port(text);
    if (!port.ok()) return Outcome::failure(port.error);
    return Outcome::success({*port.value, *port.value});
  }
  auto first = parse_port(text.substr(0, dash));
  if (!first.ok()) return Outcome::failure(first.error);
  auto last = parse_port(text.substr(dash + 1));
  if (!last.ok()) return Outcome::failure(last.error);
  if (*first.value > *last.value) {
    return Outcome::failure("range " + quote_for_message(text) +
                            " ends before it starts (write " + decimal(*last.value) + "-" +
                            decimal(*first.value) + ")");
  }
  return Outcome::success({*first.value, *last.value});
}

}  // namespace

PortSet PortSet::any() { return PortSet{}; }

ParseOutcome<PortSet> PortSet::parse(std::string_view text) {
  using Outcome = ParseOutcome<PortSet>;
  if (text == "*" || text == "any") return Outcome::success(any());
  PortSet ports;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string_view entry = text.substr(start, comma == std::string_view::npos ? text.npos
                                                                                : comma - start);
    if (entry.empty()) return Outcome::failure("empty entry in the port list");
    auto range = parse_range(entry);
    if (!range.ok()) return Outcome::failure(range.error);
    ports.ranges_.push_back(*range.value);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return Outcome::success(std::move(ports));
}

bool PortSet::contains(uint16_t port) const {
  if (ranges_.empty()) return true;
  for (const PortRange& range : ranges_) {
    if (port >= range.first && port <= range.last) return true;
  }
  return false;
}

std::string PortSet::to_string() const {
  if (ranges_.empty()) return "*";
  std::string text;
  for (const PortRange& range : ranges_) {
    if (!text.empty()) text += ',';
    text += decimal(range.first);
    if (range.last != range.first) {
      // Two appends, not "-" + decimal(): GCC 12 reports a false -Wrestrict
      // overlap for operator+(const char*, string&&) when inlined (GCC PR 105651).
      text += '-';
      text += decimal(range.last);
    }
  }
  return text;
}

}  // namespace qpsock::config
