#include "config/value_syntax.h"

#include <gtest/gtest.h>

#include "config/config_text.h"

namespace qpsock::config {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(ConfigValueSyntax, PlainBytes) {
  EXPECT_EQ(parse_size("0").value, 0u);
  EXPECT_EQ(parse_size("4096").value, 4096u);
  EXPECT_EQ(parse_size("007").value, 7u);
}

TEST(ConfigValueSyntax, BinarySuffixes) {
  EXPECT_EQ(parse_size("1K").value, 1024u);
  EXPECT_EQ(parse_size("64KiB").value, 65536u);
  EXPECT_EQ(parse_size("1M").value, 1048576u);
  EXPECT_EQ(parse_size("3MiB").value, 3u * 1048576u);
  EXPECT_EQ(parse_size("2G").value, uint64_t{2} << 30);
  EXPECT_EQ(parse_size("2GiB").value, uint64_t{2} << 30);
}

TEST(ConfigValueSyntax, SizeErrors) {
  EXPECT_EQ(parse_size("64k").error,
            "'64k' has an unknown unit 'k' (use K, KiB, M, MiB, G or GiB; K = 1024)");
  EXPECT_EQ(parse_size("64KB").error,
            "'64KB' has an unknown unit 'KB' (use K, KiB, M, MiB, G or GiB; K = 1024)");
  EXPECT_EQ(parse_size("K").error,
            "'K' is not a size (expected bytes, or a number with K, KiB, M, MiB, G or GiB)");
  EXPECT_FALSE(parse_size("").ok());
  EXPECT_FALSE(parse_size("-1").ok());
  EXPECT_FALSE(parse_size("+1").ok());
  EXPECT_FALSE(parse_size(" 1").ok());
  EXPECT_FALSE(parse_size("1 K").ok());
  EXPECT_FALSE(parse_size("1.5M").ok());
  EXPECT_FALSE(parse_size("0x10").ok());
  EXPECT_EQ(parse_size("99999999999999999999").error, "'99999999999999999999' is too large");
  EXPECT_EQ(parse_size("99999999999G").error, "'99999999999G' is too large");
}

TEST(ConfigValueSyntax, Durations) {
  EXPECT_EQ(parse_duration("0").value, microseconds{0});
  EXPECT_EQ(parse_duration("0us").value, microseconds{0});
  EXPECT_EQ(parse_duration("20us").value, microseconds{20});
  EXPECT_EQ(parse_duration("5ms").value, milliseconds{5});
  EXPECT_EQ(parse_duration("2s").value, seconds{2});
}

TEST(ConfigValueSyntax, DurationErrors) {
  EXPECT_EQ(parse_duration("5").error, "'5' needs a unit (us, ms or s)");
  EXPECT_EQ(parse_duration("5m").error, "'5m' has an unknown unit 'm' (use us, ms or s)");
  EXPECT_EQ(parse_duration("ms").error,
            "'ms' is not a duration (expected a number with us, ms or s)");
  EXPECT_FALSE(parse_duration("1.5s").ok());
  EXPECT_FALSE(parse_duration("-1ms").ok());
  EXPECT_EQ(parse_duration("99999999999999999999s").error,
            "'99999999999999999999s' is too large");
  EXPECT_EQ(parse_duration("18446744073709551s").error, "'18446744073709551s' is too large");
}

TEST(ConfigValueSyntax, FormatsRoundTrip) {
  EXPECT_EQ(format_size(0), "0");
  EXPECT_EQ(format_size(1000), "1000");
  EXPECT_EQ(format_size(1024), "1K");
  EXPECT_EQ(format_size(1536), "1536");
  EXPECT_EQ(format_size(65536), "64K");
  EXPECT_EQ(format_size(1 << 20), "1M");
  EXPECT_EQ(format_size(uint64_t{3} << 30), "3G");
  EXPECT_EQ(format_duration(microseconds{0}), "0");
  EXPECT_EQ(format_duration(microseconds{20}), "20us");
  EXPECT_EQ(format_duration(microseconds{1500}), "1500us");
  EXPECT_EQ(format_duration(milliseconds{2000}), "2s");
  EXPECT_EQ(format_duration(milliseconds{2500}), "2500ms");
  for (uint64_t bytes : {uint64_t{1}, uint64_t{1023}, uint64_t{4096}, uint64_t{5} << 30}) {
    EXPECT_EQ(parse_size(format_size(bytes)).value, bytes);
  }
}

TEST(ConfigText, SplitsWordsOnAnyBlank) {
  auto words = split_words(" offload\tboth \v\f 10.0.0.0/8\r ");
  ASSERT_EQ(words.size(), 3u);
  EXPECT_EQ(words[0], "offload");
  EXPECT_EQ(words[1], "both");
  EXPECT_EQ(words[2], "10.0.0.0/8");
  EXPECT_TRUE(split_words("  \t ").empty());
  EXPECT_EQ(trim_blanks("\t a b \r"), "a b");
}

TEST(ConfigText, Utf8Validation) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("caf\xe9"));             // Latin-1
  EXPECT_FALSE(is_valid_utf8("\xc3"));                // truncated
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));            // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xe0\x80\xaf"));        // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));        // surrogate
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));    // past U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xff"));
  EXPECT_FALSE(is_valid_utf8("\x80"));
}

TEST(ConfigText, QuotingEscapesControlBytesAndCutsLongTokens) {
  EXPECT_EQ(quote_for_message("ofload"), "'ofload'");
  EXPECT_EQ(quote_for_message("a\x1b[31mb"), "'a\\x1b[31mb'");
  EXPECT_EQ(quote_for_message(std::string_view("a\0b", 3)), "'a\\x00b'");
  EXPECT_EQ(quote_for_message("caf\xc3\xa9"), "'caf\xc3\xa9'");
  EXPECT_EQ(quote_for_message("caf\xe9"), "'caf\\xe9'");
  std::string long_token(200, 'x');
  EXPECT_EQ(quote_for_message(long_token), "'" + std::string(64, 'x') + "...'");
  // The cut never splits a multi-byte character.
  std::string accented = std::string(63, 'x') + "\xc3\xa9tail";
  EXPECT_EQ(quote_for_message(accented), "'" + std::string(63, 'x') + "\xc3\xa9...'");
}

}  // namespace
}  // namespace qpsock::config
