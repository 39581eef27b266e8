// Small text helpers shared by the config parsers. They never depend on the
// locale: the library runs inside programs that may have set any locale.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qpsock::config {

bool is_blank(char character);  // space, tab, vertical tab, form feed, carriage return
std::string_view trim_blanks(std::string_view text);
// Words separated by runs of blanks.
std::vector<std::string_view> split_words(std::string_view text);

bool is_valid_utf8(std::string_view text);

// A token as it may appear inside a diagnostic: single-quoted, control bytes
// escaped as \xNN (so a junk file cannot drive the user's terminal), and cut
// after a few dozen characters so one message stays one readable line.
std::string quote_for_message(std::string_view token);

// Number to decimal text without iostreams or the locale.
std::string decimal(unsigned long long number);

}  // namespace qpsock::config
