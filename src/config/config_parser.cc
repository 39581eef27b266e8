#include "config/config_parser.h"

#include <algorithm>
#include <optional>

#include "config/config_text.h"
#include "config/tunable_settings.h"

namespace qpsock::config {
namespace {

constexpr std::string_view kLineIgnored = "; line ignored";

std::optional<Action> parse_action(std::string_view word) {
  if (word == "offload") return Action::offload;
  if (word == "kernel") return Action::kernel;
  return std::nullopt;
}

std::optional<RuleRoles> parse_roles(std::string_view word) {
  if (word == "client") return RuleRoles::client;
  if (word == "server") return RuleRoles::server;
  if (word == "both") return RuleRoles::both;
  return std::nullopt;
}

std::string_view first_word(std::string_view content) {
  auto words = split_words(content);
  return words.empty() ? std::string_view{} : words.front();
}

// For a line rejected before it could be read: whether it may have been a
// rule. Guessing "rule" is the safe side, as a file with rules sends
// unmatched traffic to the kernel.
bool may_be_rule(std::string_view content) {
  std::string_view word = first_word(content);
  if (word.empty()) return false;
  if (parse_action(word.substr(0, word.find('=')))) return true;
  if (find_tunable(word.substr(0, word.find('='))) != nullptr) return false;
  return content.find('=') == std::string_view::npos;
}

class LineParser {
 public:
  LineParser(std::string_view file_name, size_t line_number, ConfigBuilder& builder)
      : file_name_(file_name), line_number_(line_number), builder_(builder),
        location_(std::string(file_name) + ":" + decimal(line_number)) {}

  void parse(std::string_view line) {
    // Nothing after '#' matters; '#' never occurs inside a UTF-8 sequence.
    std::string_view content = line.substr(0, line.find('#'));
    if (line.size() > kLongestLine) {
      return reject_unreadable(content, "line longer than " + decimal(kLongestLine) +
                                            " characters");
    }
    if (line.find('\0') != std::string_view::npos) {
      return reject_unreadable(content, "NUL byte in the line");
    }
    if (!is_valid_utf8(content)) return reject_unreadable(content, "invalid UTF-8");
    content = trim_blanks(content);
    if (content.empty()) return;
    if (size_t equals = content.find('='); equals != std::string_view::npos) {
      return parse_tunable(trim_blanks(content.substr(0, equals)),
                           trim_blanks(content.substr(equals + 1)));
    }
    parse_rule(split_words(content));
  }

 private:
  void report(std::string_view message) {
    builder_.report(location_ + ": " + std::string(message));
  }
  void reject(std::string_view message) { report(std::string(message) + std::string(kLineIgnored)); }

  void reject_unreadable(std::string_view content, std::string_view why) {
    if (may_be_rule(content)) builder_.note_rule_line();
    reject(why);
  }

  void parse_tunable(std::string_view name, std::string_view value) {
    if (name.empty()) return reject("missing tunable name before '='");
    const TunableDescription* tunable = find_tunable(name);
    if (tunable == nullptr) {
      if (parse_action(first_word(name))) {
        builder_.note_rule_line();
        return reject("'=' in a rule line");
      }
      std::string message = "unknown tunable " + quote_for_message(name);
      if (auto suggestion = closest_tunable_name(name)) {
        message += " (did you mean " + std::string(*suggestion) + "?)";
      }
      return reject(message);
    }
    builder_.set_tunable_from_file(*tunable, value, file_name_, line_number_);
  }

  void parse_rule(const std::vector<std::string_view>& words) {
    if (const TunableDescription* tunable = find_tunable(words[0])) {
      return reject("missing '=' after tunable " + std::string(tunable->name));
    }
    builder_.note_rule_line();
    Rule rule;
    rule.origin = location_;

    auto action = parse_action(words[0]);
    if (!action) {
      return reject("unknown action " + quote_for_message(words[0]) +
                    " (expected offload or kernel)");
    }
    rule.action = *action;

    if (words.size() < 2) return reject("missing ROLE (expected client, server or both)");
    auto roles = parse_roles(words[1]);
    if (!roles) {
      return reject("unknown role " + quote_for_message(words[1]) +
                    " (expected client, server or both)");
    }
    rule.roles = *roles;

    if (words.size() < 3) {
      return reject("missing PEER (an address, a network such as 10.0.0.0/24, or any)");
    }
    auto peer = IpNetwork::parse(words[2]);
    if (!peer.ok()) return reject("bad PEER " + quote_for_message(words[2]) + ": " + peer.error);
    rule.peer = *peer.value;

    if (words.size() >= 4) {
      auto ports = PortSet::parse(words[3]);
      if (!ports.ok()) {
        return reject("bad PORTS " + quote_for_message(words[3]) + ": " + ports.error);
      }
      rule.ports = std::move(*ports.value);
    }
    if (words.size() >= 5) {
      auto local = IpNetwork::parse(words[4]);
      if (!local.ok()) {
        return reject("bad LOCAL " + quote_for_message(words[4]) + ": " + local.error);
      }
      rule.local = *local.value;
    }
    if (words.size() > 5) {
      return reject("too many fields from " + quote_for_message(words[5]) +
                    " on (expected ACTION ROLE PEER [PORTS [LOCAL]])");
    }
    builder_.add_rule(std::move(rule));
  }

  std::string_view file_name_;
  size_t line_number_;
  ConfigBuilder& builder_;
  std::string location_;
};

}  // namespace

void parse_config_lines(std::string_view text, std::string_view file_name,
                        ConfigBuilder& builder) {
  size_t line_number = 0;
  size_t start = 0;
  while (start < text.size()) {
    ++line_number;
    size_t end = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, end - start);
    // Files edited on Windows end their lines with "\r\n".
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    LineParser(file_name, line_number, builder).parse(line);
    start = end + 1;
  }
}

ParseResult parse_config_text(std::string_view text, std::string_view file_name) {
  ConfigBuilder builder;
  builder.use_file(file_name);
  parse_config_lines(text, file_name, builder);
  return std::move(builder).finish();
}

}  // namespace qpsock::config
