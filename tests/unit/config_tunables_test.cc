// The tunable half of qpsock.conf: values, units, ranges and their messages.
#include <gtest/gtest.h>

#include "config/config_parser.h"
#include "config/tunable_settings.h"

namespace qpsock::config {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;

ParseResult parse(std::string_view text) { return parse_config_text(text, "t.conf"); }

Tunables tunables_of(std::string_view text) {
  ParseResult result = parse(text);
  EXPECT_TRUE(result.diagnostics.empty()) << text << ": " << result.diagnostics.front();
  return result.config.tunables();
}

std::string only_diagnostic(std::string_view text) {
  ParseResult result = parse(text);
  EXPECT_EQ(result.diagnostics.size(), 1u) << text;
  return result.diagnostics.empty() ? "" : result.diagnostics.front();
}

TEST(ConfigTunables, Defaults) {
  Tunables defaults = Config().tunables();
  EXPECT_FALSE(defaults.inline_size.has_value());
  EXPECT_EQ(defaults.rendezvous_threshold, 64u * 1024);
  EXPECT_EQ(defaults.ring_size, 1024u * 1024);
  EXPECT_EQ(defaults.eager_chunk, 64u * 1024);
  EXPECT_EQ(defaults.spin_time, microseconds{20});
  EXPECT_EQ(defaults.spin_limit, milliseconds{1});
  EXPECT_EQ(defaults.rendezvous_patience, milliseconds{10});
  EXPECT_EQ(defaults.upgrade_timeout, milliseconds{2000});
  EXPECT_EQ(defaults.rdma_upgrade_delay, milliseconds{200});
  EXPECT_EQ(defaults.shm_upgrade_delay, milliseconds{50});
  EXPECT_EQ(defaults.shm_upgrade_bytes, 1024u * 1024);
  EXPECT_EQ(defaults.link_idle_time, seconds{10});
  EXPECT_EQ(defaults.same_host, SameHost::shm);
  EXPECT_EQ(tunables_of(""), defaults);
}

TEST(ConfigTunables, CatalogueNamesEveryTunableAndItsVariable) {
  std::vector<std::string> names;
  for (const TunableDescription& tunable : all_tunables()) {
    names.emplace_back(tunable.name);
    std::string expected_variable = "QPSOCK_";
    for (char character : tunable.name) {
      expected_variable += static_cast<char>(character >= 'a' && character <= 'z'
                                                 ? character - 'a' + 'A' : character);
    }
    EXPECT_EQ(tunable.environment_name, expected_variable);
    EXPECT_EQ(find_tunable(tunable.name), &tunable);
    EXPECT_EQ(&all_tunables()[tunable_index(tunable)], &tunable);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"inline_size", "rendezvous_threshold",
                                             "rendezvous_patience", "ring_size",
                                             "eager_chunk", "spin_time", "spin_limit", "upgrade_timeout",
                                             "rdma_upgrade_delay", "shm_upgrade_delay",
                                             "shm_upgrade_bytes", "link_idle_time", "same_host"}));
}

TEST(ConfigTunables, InlineSize) {
  EXPECT_EQ(tunables_of("inline_size = 0").inline_size, 0u);
  EXPECT_EQ(tunables_of("inline_size = 220").inline_size, 220u);
  EXPECT_EQ(tunables_of("inline_size = 1K").inline_size, 1024u);
  EXPECT_EQ(tunables_of("inline_size = 1024").inline_size, 1024u);
  EXPECT_EQ(only_diagnostic("inline_size = 1025"),
            "t.conf:1: inline_size: '1025' is above the maximum 1K; default auto kept");
  EXPECT_EQ(only_diagnostic("inline_size = big"),
            "t.conf:1: inline_size: 'big' is not a size (expected bytes, or a number with K, "
            "KiB, M, MiB, G or GiB) (or auto); default auto kept");
}

TEST(ConfigTunables, InlineSizeAutoAfterANumber) {
  ParseResult result = parse("inline_size = 64\ninline_size = auto\n");
  EXPECT_FALSE(result.config.tunables().inline_size.has_value());
  ASSERT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(result.diagnostics[0],
            "t.conf:2: inline_size set again (previously at t.conf:1); this value wins");
}

TEST(ConfigTunables, RendezvousThreshold) {
  EXPECT_EQ(tunables_of("rendezvous_threshold = 1K").rendezvous_threshold, 1024u);
  EXPECT_EQ(tunables_of("rendezvous_threshold = 64MiB").rendezvous_threshold, 64u << 20);
  EXPECT_EQ(tunables_of("rendezvous_threshold = 200000").rendezvous_threshold, 200000u);
  EXPECT_EQ(only_diagnostic("rendezvous_threshold = 10"),
            "t.conf:1: rendezvous_threshold: '10' is below the minimum 1K; default 64K kept");
  EXPECT_EQ(only_diagnostic("rendezvous_threshold = 65M"),
            "t.conf:1: rendezvous_threshold: '65M' is above the maximum 64M; default 64K kept");
}

TEST(ConfigTunables, RingSizeMustBeAPowerOfTwo) {
  EXPECT_EQ(tunables_of("ring_size = 64K").ring_size, 64u << 10);
  EXPECT_EQ(tunables_of("ring_size = 256M").ring_size, 256u << 20);
  EXPECT_EQ(tunables_of("ring_size = 4194304").ring_size, 4u << 20);
  EXPECT_EQ(only_diagnostic("ring_size = 100K"),
            "t.conf:1: ring_size: '100K' is not a power of two; default 1M kept");
  EXPECT_EQ(only_diagnostic("ring_size = 32K"),
            "t.conf:1: ring_size: '32K' is below the minimum 64K; default 1M kept");
  EXPECT_EQ(only_diagnostic("ring_size = 512M"),
            "t.conf:1: ring_size: '512M' is above the maximum 256M; default 1M kept");
}

TEST(ConfigTunables, EagerChunk) {
  EXPECT_EQ(tunables_of("eager_chunk = 1K").eager_chunk, 1024u);
  EXPECT_EQ(tunables_of("eager_chunk = 512K").eager_chunk, 512u << 10);
  EXPECT_EQ(only_diagnostic("eager_chunk = 512"),
            "t.conf:1: eager_chunk: '512' is below the minimum 1K; default 64K kept");
}

TEST(ConfigTunables, EagerChunkMustFitHalfTheRing) {
  // Checked after every line: the order of the two lines does not matter.
  for (auto [text, line] : {std::pair{"eager_chunk = 1M\nring_size = 1M\n", 1},
                            std::pair{"ring_size = 1M\neager_chunk = 1M\n", 2},
                            std::pair{"eager_chunk = 1M\n", 1}}) {
    ParseResult result = parse(text);
    ASSERT_EQ(result.diagnostics.size(), 1u) << text;
    EXPECT_EQ(result.diagnostics[0],
              "t.conf:" + std::to_string(line) +
                  ": eager_chunk: 1M is more than half of ring_size 1M; default 64K used");
    EXPECT_EQ(result.config.tunables().eager_chunk, 64u << 10);
  }
  EXPECT_EQ(only_diagnostic("ring_size = 64K\neager_chunk = 64K\n"),
            "t.conf:2: eager_chunk: 64K is more than half of ring_size 64K; 32K (half of "
            "ring_size) used");
  EXPECT_EQ(tunables_of("ring_size = 128K\neager_chunk = 64K\n").eager_chunk, 64u << 10);
  EXPECT_EQ(tunables_of("ring_size = 256M\neager_chunk = 128M\n").eager_chunk, 128u << 20);
}

TEST(ConfigTunables, SmallRingQuietlyShrinksTheDefaultChunk) {
  Tunables tunables = tunables_of("ring_size = 64K\n");
  EXPECT_EQ(tunables.ring_size, 64u << 10);
  EXPECT_EQ(tunables.eager_chunk, 32u << 10);
}

TEST(ConfigTunables, SpinTime) {
  EXPECT_EQ(tunables_of("spin_time = 0").spin_time, microseconds{0});
  EXPECT_EQ(tunables_of("spin_time = 0ms").spin_time, microseconds{0});
  EXPECT_EQ(tunables_of("spin_time = 150us").spin_time, microseconds{150});
  EXPECT_EQ(tunables_of("rendezvous_patience = 0").rendezvous_patience, microseconds{0});
  EXPECT_EQ(tunables_of("rendezvous_patience = 50ms").rendezvous_patience, milliseconds{50});
  EXPECT_EQ(only_diagnostic("rendezvous_patience = 11s"),
            "t.conf:1: rendezvous_patience: '11s' is above the maximum 10s; default 10ms kept");
  EXPECT_EQ(tunables_of("spin_time = 3ms").spin_time, microseconds{3000});
  EXPECT_EQ(tunables_of("spin_time = 1s").spin_time, seconds{1});
  EXPECT_EQ(tunables_of("spin_limit = 0").spin_limit, microseconds{0});
  EXPECT_EQ(tunables_of("spin_limit = 250us").spin_limit, microseconds{250});
  EXPECT_EQ(only_diagnostic("spin_limit = 2s"),
            "t.conf:1: spin_limit: '2s' is above the maximum 1s; default 1ms kept");
  EXPECT_EQ(only_diagnostic("spin_time = 20"),
            "t.conf:1: spin_time: '20' needs a unit (us, ms or s); default 20us kept");
  EXPECT_EQ(only_diagnostic("spin_time = 1001ms"),
            "t.conf:1: spin_time: '1001ms' is above the maximum 1s; default 20us kept");
}

TEST(ConfigTunables, UpgradeTimeout) {
  EXPECT_EQ(tunables_of("upgrade_timeout = 10ms").upgrade_timeout, milliseconds{10});
  EXPECT_EQ(tunables_of("upgrade_timeout = 60s").upgrade_timeout, seconds{60});
  EXPECT_EQ(tunables_of("upgrade_timeout = 15000us").upgrade_timeout, milliseconds{15});
  EXPECT_EQ(only_diagnostic("upgrade_timeout = 9ms"),
            "t.conf:1: upgrade_timeout: '9ms' is below the minimum 10ms; default 2s kept");
  EXPECT_EQ(only_diagnostic("upgrade_timeout = 61s"),
            "t.conf:1: upgrade_timeout: '61s' is above the maximum 60s; default 2s kept");
  EXPECT_EQ(only_diagnostic("upgrade_timeout = 0"),
            "t.conf:1: upgrade_timeout: '0' is below the minimum 10ms; default 2s kept");
  EXPECT_EQ(only_diagnostic("upgrade_timeout = 2000"),
            "t.conf:1: upgrade_timeout: '2000' needs a unit (us, ms or s); default 2s kept");
}

TEST(ConfigTunables, RdmaUpgradeDelay) {
  EXPECT_EQ(tunables_of("rdma_upgrade_delay = 0").rdma_upgrade_delay, microseconds{0});
  EXPECT_EQ(tunables_of("rdma_upgrade_delay = 200ms").rdma_upgrade_delay, milliseconds{200});
  EXPECT_EQ(tunables_of("upgrade_timeout = 20s\nrdma_upgrade_delay = 10s").rdma_upgrade_delay,
            seconds{10});
  EXPECT_EQ(only_diagnostic("rdma_upgrade_delay = 11s"),
            "t.conf:1: rdma_upgrade_delay: '11s' is above the maximum 10s; default 200ms kept");
  EXPECT_EQ(only_diagnostic("rdma_upgrade_delay = 50"),
            "t.conf:1: rdma_upgrade_delay: '50' needs a unit (us, ms or s); default 200ms kept");
}

TEST(ConfigTunables, RdmaUpgradeDelayMustBeShorterThanTheUpgradeTimeout) {
  // The client's offer would be gone before any server came.
  EXPECT_EQ(only_diagnostic("rdma_upgrade_delay = 3s\n"),
            "t.conf:1: rdma_upgrade_delay: 3s is not shorter than upgrade_timeout 2s, whose end "
            "no upgrade would meet; 1s (half of upgrade_timeout) used");
  EXPECT_EQ(parse("rdma_upgrade_delay = 3s\n").config.tunables().rdma_upgrade_delay, seconds{1});
  // A deliberately short timeout quietly shortens the default delay.
  ParseResult result = parse("upgrade_timeout = 40ms\n");
  EXPECT_TRUE(result.diagnostics.empty());
  EXPECT_EQ(result.config.tunables().rdma_upgrade_delay, milliseconds{20});
}

TEST(ConfigTunables, ShmUpgradeDelay) {
  EXPECT_EQ(tunables_of("shm_upgrade_delay = 0").shm_upgrade_delay, microseconds{0});
  EXPECT_EQ(tunables_of("shm_upgrade_delay = 50ms").shm_upgrade_delay, milliseconds{50});
  EXPECT_EQ(only_diagnostic("shm_upgrade_delay = 11s"),
            "t.conf:1: shm_upgrade_delay: '11s' is above the maximum 10s; default 50ms kept");
  // As rdma_upgrade_delay: the client's offer would be gone before any server came.
  EXPECT_EQ(only_diagnostic("shm_upgrade_delay = 2s\n"),
            "t.conf:1: shm_upgrade_delay: 2s is not shorter than upgrade_timeout 2s, whose end "
            "no upgrade would meet; 1s (half of upgrade_timeout) used");
  EXPECT_EQ(parse("shm_upgrade_delay = 2s\n").config.tunables().shm_upgrade_delay, seconds{1});
}

TEST(ConfigTunables, ShmUpgradeBytes) {
  EXPECT_EQ(tunables_of("shm_upgrade_bytes = 256K").shm_upgrade_bytes, 256u * 1024);
  EXPECT_EQ(tunables_of("shm_upgrade_bytes = 1G").shm_upgrade_bytes, uint64_t{1} << 30);
  EXPECT_EQ(only_diagnostic("shm_upgrade_bytes = 1K"),
            "t.conf:1: shm_upgrade_bytes: '1K' is below the minimum 4K; default 1M kept");
  EXPECT_EQ(only_diagnostic("shm_upgrade_bytes = lots"),
            "t.conf:1: shm_upgrade_bytes: 'lots' is not a size (expected bytes, or a number with "
            "K, KiB, M, MiB, G or GiB); default 1M kept");
}

TEST(ConfigTunables, SameHost) {
  EXPECT_EQ(tunables_of("link_idle_time = 0").link_idle_time, microseconds{0});
  EXPECT_EQ(tunables_of("link_idle_time = 2s").link_idle_time, seconds{2});
  EXPECT_EQ(only_diagnostic("link_idle_time = 2h"),
            "t.conf:1: link_idle_time: '2h' has an unknown unit 'h' (use us, ms or s); default 10s kept");
  EXPECT_EQ(tunables_of("same_host = shm").same_host, SameHost::shm);
  EXPECT_EQ(tunables_of("same_host = rdma").same_host, SameHost::rdma);
  EXPECT_EQ(tunables_of("same_host = kernel").same_host, SameHost::kernel);
  EXPECT_EQ(only_diagnostic("same_host = tcp"),
            "t.conf:1: same_host: 'tcp' is not shm, rdma or kernel; default shm kept");
  EXPECT_STREQ(same_host_name(SameHost::rdma), "rdma");
}

TEST(ConfigTunables, UnknownNames) {
  EXPECT_EQ(only_diagnostic("inline_sise = 128"),
            "t.conf:1: unknown tunable 'inline_sise' (did you mean inline_size?); line ignored");
  EXPECT_EQ(only_diagnostic("ringsize = 1M"),
            "t.conf:1: unknown tunable 'ringsize' (did you mean ring_size?); line ignored");
  EXPECT_EQ(only_diagnostic("colour = blue"),
            "t.conf:1: unknown tunable 'colour'; line ignored");
  EXPECT_EQ(only_diagnostic("Spin_Time = 5us"),
            "t.conf:1: unknown tunable 'Spin_Time' (did you mean spin_time?); line ignored");
  EXPECT_EQ(only_diagnostic("= 5"), "t.conf:1: missing tunable name before '='; line ignored");
  EXPECT_EQ(closest_tunable_name(std::string(300, 'x')), std::nullopt);
}

TEST(ConfigTunables, MissingOrMalformedValue) {
  EXPECT_EQ(only_diagnostic("spin_time ="),
            "t.conf:1: spin_time: missing value; default 20us kept");
  EXPECT_EQ(only_diagnostic("spin_time = # set later"),
            "t.conf:1: spin_time: missing value; default 20us kept");
  EXPECT_EQ(only_diagnostic("ring_size = 2 M"),
            "t.conf:1: ring_size: '2 M' has an unknown unit ' M' (use K, KiB, M, MiB, G or GiB; "
            "K = 1024); default 1M kept");
  EXPECT_EQ(only_diagnostic("ring_size = 1M = 2M"),
            "t.conf:1: ring_size: '1M = 2M' has an unknown unit 'M = 2M' (use K, KiB, M, MiB, G "
            "or GiB; K = 1024); default 1M kept");
}

TEST(ConfigTunables, DuplicatesLastWinsWithAWarning) {
  ParseResult result = parse("spin_time = 5us\n\nspin_time = 7us\n");
  EXPECT_EQ(result.config.tunables().spin_time, microseconds{7});
  ASSERT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(result.diagnostics[0],
            "t.conf:3: spin_time set again (previously at t.conf:1); this value wins");
}

TEST(ConfigTunables, ABadDuplicateKeepsTheEarlierValue) {
  ParseResult result = parse("ring_size = 2M\nring_size = 3M\n");
  EXPECT_EQ(result.config.tunables().ring_size, 2u << 20);
  ASSERT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(result.diagnostics[0],
            "t.conf:2: ring_size: '3M' is not a power of two; 2M from t.conf:1 kept");
}

TEST(ConfigTunables, EveryTunableAtOnce) {
  Tunables tunables = tunables_of(
      "inline_size = 256\n"
      "rendezvous_threshold = 128K\n"
      "ring_size = 4M\n"
      "eager_chunk = 256K\n"
      "spin_time = 50us\n"
      "upgrade_timeout = 500ms\n"
      "rdma_upgrade_delay = 100ms\n"
      "same_host = rdma\n");
  EXPECT_EQ(tunables.inline_size, 256u);
  EXPECT_EQ(tunables.rendezvous_threshold, 128u << 10);
  EXPECT_EQ(tunables.ring_size, 4u << 20);
  EXPECT_EQ(tunables.eager_chunk, 256u << 10);
  EXPECT_EQ(tunables.spin_time, microseconds{50});
  EXPECT_EQ(tunables.upgrade_timeout, milliseconds{500});
  EXPECT_EQ(tunables.rdma_upgrade_delay, milliseconds{100});
  EXPECT_EQ(tunables.same_host, SameHost::rdma);
}

}  // namespace
}  // namespace qpsock::config
