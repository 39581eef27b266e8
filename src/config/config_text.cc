#include "config/config_text.h"

#include <charconv>

namespace qpsock::config {
namespace {

constexpr size_t kLongestQuotedToken = 64;

bool is_continuation_byte(unsigned char byte) { return (byte & 0xC0) == 0x80; }

}  // namespace

bool is_blank(char character) {
  return character == ' ' || character == '\t' || character == '\v' || character == '\f' ||
         character == '\r';
}

std::string_view trim_blanks(std::string_view text) {
  while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
  return text;
}

std::vector<std::string_view> split_words(std::string_view text) {
  std::vector<std::string_view> words;
  size_t position = 0;
  while (position < text.size()) {
    while (position < text.size() && is_blank(text[position])) ++position;
    size_t start = position;
    while (position < text.size() && !is_blank(text[position])) ++position;
    if (position > start) words.push_back(text.substr(start, position - start));
  }
  return words;
}

bool is_valid_utf8(std::string_view text) {
  size_t position = 0;
  while (position < text.size()) {
    auto lead = static_cast<unsigned char>(text[position]);
    if (lead < 0x80) {
      ++position;
      continue;
    }
    size_t length;
    char32_t code_point;
    if ((lead & 0xE0) == 0xC0) {
      length = 2;
      code_point = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3;
      code_point = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4;
      code_point = lead & 0x07;
    } else {
      return false;
    }
    if (text.size() - position < length) return false;
    for (size_t index = 1; index < length; ++index) {
      auto byte = static_cast<unsigned char>(text[position + index]);
      if (!is_continuation_byte(byte)) return false;
      code_point = (code_point << 6) | (byte & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and values past Unicode are all ways
    // of smuggling bytes past a validator; reject them like any junk.
    constexpr char32_t kSmallestForLength[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code_point < kSmallestForLength[length]) return false;
    if (code_point >= 0xD800 && code_point <= 0xDFFF) return false;
    if (code_point > 0x10FFFF) return false;
    position += length;
  }
  return true;
}

std::string quote_for_message(std::string_view token) {
  static constexpr char kHexDigits[] = "0123456789abcdef";
  // Non-ASCII text is shown as it is only when it is well-formed UTF-8.
  bool keep_non_ascii = is_valid_utf8(token);
  std::string quoted = "'";
  size_t shown = 0;
  size_t position = 0;
  for (; position < token.size() && shown < kLongestQuotedToken; ++position, ++shown) {
    auto byte = static_cast<unsigned char>(token[position]);
    bool printable = byte >= 0x20 && byte != 0x7F && (byte < 0x80 || keep_non_ascii);
    if (printable) {
      quoted += static_cast<char>(byte);
    } else {
      quoted += "\\x";
      quoted += kHexDigits[byte >> 4];
      quoted += kHexDigits[byte & 0xF];
    }
  }
  // Never cut a multi-byte character in half.
  while (keep_non_ascii && position < token.size() &&
         is_continuation_byte(static_cast<unsigned char>(token[position]))) {
    quoted += token[position++];
  }
  if (position < token.size()) quoted += "...";
  quoted += '\'';
  return quoted;
}

std::string decimal(unsigned long long number) {
  char buffer[24];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), number);
  (void)error;  // 24 characters always hold a 64-bit number
  return std::string(buffer, end);
}

}  // namespace qpsock::config
