#include "config/value_syntax.h"

#include <charconv>
#include <limits>

#include "config/config_text.h"

namespace qpsock::config {
namespace {

struct Unit {
  std::string_view suffix;
  uint64_t multiplier;
};

constexpr Unit kSizeUnits[] = {
    {"K", uint64_t{1} << 10}, {"KiB", uint64_t{1} << 10}, {"M", uint64_t{1} << 20},
    {"MiB", uint64_t{1} << 20}, {"G", uint64_t{1} << 30}, {"GiB", uint64_t{1} << 30},
};
constexpr Unit kDurationUnits[] = {{"us", 1}, {"ms", 1000}, {"s", 1000000}};

bool is_digit(char character) { return character >= '0' && character <= '9'; }

// Splits "64KiB" into "64" and "KiB".
std::pair<std::string_view, std::string_view> split_number_and_unit(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && is_digit(text[digits])) ++digits;
  return {text.substr(0, digits), text.substr(digits)};
}

// number * multiplier, or nothing on overflow.
std::optional<uint64_t> scaled(uint64_t number, uint64_t multiplier) {
  if (number > std::numeric_limits<uint64_t>::max() / multiplier) return std::nullopt;
  return number * multiplier;
}

std::string too_large(std::string_view text) { return quote_for_message(text) + " is too large"; }

}  // namespace

ParseOutcome<uint64_t> parse_unsigned(std::string_view text) {
  if (text.empty()) return ParseOutcome<uint64_t>::failure("the value is empty");
  uint64_t number = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  // from_chars would accept nothing but digits for an unsigned type anyway;
  // the explicit check keeps "+5" and " 5" out whatever the library does.
  if (!is_digit(text.front()) || end != text.data() + text.size() ||
      error == std::errc::invalid_argument) {
    return ParseOutcome<uint64_t>::failure(quote_for_message(text) + " is not a number");
  }
  if (error == std::errc::result_out_of_range) {
    return ParseOutcome<uint64_t>::failure(too_large(text));
  }
  return ParseOutcome<uint64_t>::success(number);
}

ParseOutcome<uint64_t> parse_size(std::string_view text) {
  auto [digits, unit] = split_number_and_unit(text);
  if (digits.empty()) {
    return ParseOutcome<uint64_t>::failure(
        quote_for_message(text) + " is not a size (expected bytes, or a number with K, KiB, M, "
                                  "MiB, G or GiB)");
  }
  auto number = parse_unsigned(digits);
  if (!number.ok()) return ParseOutcome<uint64_t>::failure(too_large(text));
  if (unit.empty()) return number;
  for (const Unit& candidate : kSizeUnits) {
    if (candidate.suffix != unit) continue;
    auto bytes = scaled(*number.value, candidate.multiplier);
    if (!bytes) return ParseOutcome<uint64_t>::failure(too_large(text));
    return ParseOutcome<uint64_t>::success(*bytes);
  }
  return ParseOutcome<uint64_t>::failure(quote_for_message(text) + " has an unknown unit " +
                                         quote_for_message(unit) +
                                         " (use K, KiB, M, MiB, G or GiB; K = 1024)");
}

ParseOutcome<std::chrono::microseconds> parse_duration(std::string_view text) {
  using Outcome = ParseOutcome<std::chrono::microseconds>;
  auto [digits, unit] = split_number_and_unit(text);
  if (digits.empty()) {
    return Outcome::failure(quote_for_message(text) +
                            " is not a duration (expected a number with us, ms or s)");
  }
  auto number = parse_unsigned(digits);
  if (!number.ok()) return Outcome::failure(too_large(text));
  if (unit.empty()) {
    // A bare number is ambiguous (microseconds? milliseconds?) except zero.
    if (*number.value == 0) return Outcome::success(std::chrono::microseconds{0});
    return Outcome::failure(quote_for_message(text) + " needs a unit (us, ms or s)");
  }
  for (const Unit& candidate : kDurationUnits) {
    if (candidate.suffix != unit) continue;
    auto microseconds = scaled(*number.value, candidate.multiplier);
    if (!microseconds ||
        *microseconds > static_cast<uint64_t>(std::chrono::microseconds::max().count())) {
      return Outcome::failure(too_large(text));
    }
    return Outcome::success(
        std::chrono::microseconds{static_cast<std::chrono::microseconds::rep>(*microseconds)});
  }
  return Outcome::failure(quote_for_message(text) + " has an unknown unit " +
                          quote_for_message(unit) + " (use us, ms or s)");
}

std::string format_size(uint64_t bytes) {
  constexpr std::pair<uint64_t, const char*> kLargestFirst[] = {
      {uint64_t{1} << 30, "G"}, {uint64_t{1} << 20, "M"}, {uint64_t{1} << 10, "K"}};
  if (bytes != 0) {
    for (auto [multiplier, suffix] : kLargestFirst) {
      if (bytes % multiplier == 0) return decimal(bytes / multiplier) + suffix;
    }
  }
  return decimal(bytes);
}

std::string format_duration(std::chrono::microseconds duration) {
  auto count = static_cast<uint64_t>(duration.count());
  if (count == 0) return "0";
  if (count % 1000000 == 0) return decimal(count / 1000000) + "s";
  if (count % 1000 == 0) return decimal(count / 1000) + "ms";
  return decimal(count) + "us";
}

}  // namespace qpsock::config
