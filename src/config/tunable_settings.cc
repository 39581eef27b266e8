#include "config/tunable_settings.h"

#include <algorithm>
#include <array>

#include "config/config_text.h"
#include "config/value_syntax.h"

namespace qpsock::config {
namespace {

using std::chrono::microseconds;

// Empty when `value` (spelled `text`) lies in [smallest, largest].
template <typename Number, typename Formatter>
std::string range_problem(std::string_view text, Number value, Number smallest, Number largest,
                          Formatter format) {
  if (value < smallest) {
    return quote_for_message(text) + " is below the minimum " + format(smallest);
  }
  if (value > largest) {
    return quote_for_message(text) + " is above the maximum " + format(largest);
  }
  return {};
}

// A size within [smallest, largest], stored through `store`.
template <typename Store>
std::string assign_size(std::string_view text, uint64_t smallest, uint64_t largest, Store store) {
  auto bytes = parse_size(text);
  if (!bytes.ok()) return bytes.error;
  std::string problem = range_problem(text, *bytes.value, smallest, largest, format_size);
  if (problem.empty()) store(*bytes.value);
  return problem;
}

template <typename Store>
std::string assign_duration(std::string_view text, microseconds smallest, microseconds largest,
                            Store store) {
  auto duration = parse_duration(text);
  if (!duration.ok()) return duration.error;
  std::string problem = range_problem(text, *duration.value, smallest, largest, format_duration);
  if (problem.empty()) store(*duration.value);
  return problem;
}

std::string assign_inline_size(std::string_view text, Tunables& tunables) {
  if (text == "auto") {
    tunables.inline_size.reset();
    return {};
  }
  auto bytes = parse_size(text);
  if (!bytes.ok()) return bytes.error + " (or auto)";
  std::string problem = range_problem(text, *bytes.value, uint64_t{0},
                                      uint64_t{limits::kLargestInlineSize}, format_size);
  if (problem.empty()) tunables.inline_size = static_cast<uint32_t>(*bytes.value);
  return problem;
}

std::string assign_rendezvous_threshold(std::string_view text, Tunables& tunables) {
  return assign_size(text, limits::kSmallestRendezvousThreshold,
                     limits::kLargestRendezvousThreshold,
                     [&](uint64_t bytes) { tunables.rendezvous_threshold = bytes; });
}

std::string assign_rendezvous_patience(std::string_view text, Tunables& tunables) {
  return assign_duration(text, microseconds{0}, limits::kLongestRendezvousPatience,
                         [&](microseconds duration) { tunables.rendezvous_patience = duration; });
}

std::string assign_ring_size(std::string_view text, Tunables& tunables) {
  auto bytes = parse_size(text);
  if (!bytes.ok()) return bytes.error;
  std::string problem = range_problem(text, *bytes.value, limits::kSmallestRingSize,
                                      limits::kLargestRingSize, format_size);
  if (!problem.empty()) return problem;
  // Ring positions wrap with a mask instead of a division.
  if ((*bytes.value & (*bytes.value - 1)) != 0) {
    return quote_for_message(text) + " is not a power of two";
  }
  tunables.ring_size = *bytes.value;
  return {};
}

std::string assign_eager_chunk(std::string_view text, Tunables& tunables) {
  return assign_size(text, limits::kSmallestEagerChunk, limits::kLargestEagerChunk,
                     [&](uint64_t bytes) { tunables.eager_chunk = bytes; });
}

std::string assign_spin_time(std::string_view text, Tunables& tunables) {
  return assign_duration(text, microseconds{0}, limits::kLargestSpinTime,
                         [&](microseconds duration) { tunables.spin_time = duration; });
}

std::string assign_spin_limit(std::string_view text, Tunables& tunables) {
  return assign_duration(text, microseconds{0}, limits::kLargestSpinTime,
                         [&](microseconds duration) { tunables.spin_limit = duration; });
}

std::string assign_upgrade_timeout(std::string_view text, Tunables& tunables) {
  return assign_duration(text, limits::kShortestUpgradeTimeout, limits::kLongestUpgradeTimeout,
                         [&](microseconds duration) { tunables.upgrade_timeout = duration; });
}

std::string assign_rdma_upgrade_delay(std::string_view text, Tunables& tunables) {
  return assign_duration(text, microseconds{0}, limits::kLongestRdmaUpgradeDelay,
                         [&](microseconds duration) { tunables.rdma_upgrade_delay = duration; });
}

std::string assign_shm_upgrade_delay(std::string_view text, Tunables& tunables) {
  return assign_duration(text, microseconds{0}, limits::kLongestShmUpgradeDelay,
                         [&](microseconds duration) { tunables.shm_upgrade_delay = duration; });
}

std::string assign_shm_upgrade_bytes(std::string_view text, Tunables& tunables) {
  return assign_size(text, limits::kSmallestShmUpgradeBytes, limits::kLargestShmUpgradeBytes,
                     [&](uint64_t bytes) { tunables.shm_upgrade_bytes = bytes; });
}

std::string assign_link_idle_time(std::string_view text, Tunables& tunables) {
  return assign_duration(text, microseconds{0}, limits::kLongestLinkIdleTime,
                         [&](microseconds duration) { tunables.link_idle_time = duration; });
}

std::string assign_same_host(std::string_view text, Tunables& tunables) {
  constexpr SameHost kChoices[] = {SameHost::shm, SameHost::rdma, SameHost::kernel};
  for (SameHost choice : kChoices) {
    if (text == same_host_name(choice)) {
      tunables.same_host = choice;
      return {};
    }
  }
  return quote_for_message(text) + " is not shm, rdma or kernel";
}

constexpr std::array<TunableDescription, kTunableCount> kTunables = {{
    {"inline_size", "QPSOCK_INLINE_SIZE", assign_inline_size,
     [](const Tunables& tunables) -> std::string {
       return tunables.inline_size ? format_size(*tunables.inline_size) : "auto";
     }},
    {"rendezvous_threshold", "QPSOCK_RENDEZVOUS_THRESHOLD", assign_rendezvous_threshold,
     [](const Tunables& tunables) { return format_size(tunables.rendezvous_threshold); }},
    {"rendezvous_patience", "QPSOCK_RENDEZVOUS_PATIENCE", assign_rendezvous_patience,
     [](const Tunables& tunables) { return format_duration(tunables.rendezvous_patience); }},
    {"ring_size", "QPSOCK_RING_SIZE", assign_ring_size,
     [](const Tunables& tunables) { return format_size(tunables.ring_size); }},
    {"eager_chunk", "QPSOCK_EAGER_CHUNK", assign_eager_chunk,
     [](const Tunables& tunables) { return format_size(tunables.eager_chunk); }},
    {"spin_time", "QPSOCK_SPIN_TIME", assign_spin_time,
     [](const Tunables& tunables) { return format_duration(tunables.spin_time); }},
    {"spin_limit", "QPSOCK_SPIN_LIMIT", assign_spin_limit,
     [](const Tunables& tunables) { return format_duration(tunables.spin_limit); }},
    {"upgrade_timeout", "QPSOCK_UPGRADE_TIMEOUT", assign_upgrade_timeout,
     [](const Tunables& tunables) { return format_duration(tunables.upgrade_timeout); }},
    {"rdma_upgrade_delay", "QPSOCK_RDMA_UPGRADE_DELAY", assign_rdma_upgrade_delay,
     [](const Tunables& tunables) { return format_duration(tunables.rdma_upgrade_delay); }},
    {"shm_upgrade_delay", "QPSOCK_SHM_UPGRADE_DELAY", assign_shm_upgrade_delay,
     [](const Tunables& tunables) { return format_duration(tunables.shm_upgrade_delay); }},
    {"shm_upgrade_bytes", "QPSOCK_SHM_UPGRADE_BYTES", assign_shm_upgrade_bytes,
     [](const Tunables& tunables) { return format_size(tunables.shm_upgrade_bytes); }},
    {"link_idle_time", "QPSOCK_LINK_IDLE_TIME", assign_link_idle_time,
     [](const Tunables& tunables) { return format_duration(tunables.link_idle_time); }},
    {"same_host", "QPSOCK_SAME_HOST", assign_same_host,
     [](const Tunables& tunables) -> std::string { return same_host_name(tunables.same_host); }},
}};

// Levenshtein distance, stopping early once it exceeds `limit` (names are short).
size_t edit_distance(std::string_view left, std::string_view right, size_t limit) {
  if (left.size() > right.size() + limit || right.size() > left.size() + limit) return limit + 1;
  std::array<size_t, 64> previous{};
  std::array<size_t, 64> current{};
  if (right.size() >= previous.size()) return limit + 1;
  for (size_t column = 0; column <= right.size(); ++column) previous[column] = column;
  for (size_t row = 1; row <= left.size(); ++row) {
    current[0] = row;
    size_t row_minimum = current[0];
    for (size_t column = 1; column <= right.size(); ++column) {
      size_t substitution = previous[column - 1] + (left[row - 1] == right[column - 1] ? 0 : 1);
      current[column] = std::min({previous[column] + 1, current[column - 1] + 1, substitution});
      row_minimum = std::min(row_minimum, current[column]);
    }
    if (row_minimum > limit) return limit + 1;
    previous = current;
  }
  return previous[right.size()];
}

}  // namespace

std::span<const TunableDescription, kTunableCount> all_tunables() { return kTunables; }

const TunableDescription* find_tunable(std::string_view name) {
  for (const TunableDescription& description : kTunables) {
    if (description.name == name) return &description;
  }
  return nullptr;
}

size_t tunable_index(const TunableDescription& description) {
  return static_cast<size_t>(&description - kTunables.data());
}

std::optional<std::string_view> closest_tunable_name(std::string_view misspelled) {
  constexpr size_t kMostEdits = 2;
  std::optional<std::string_view> best;
  size_t best_distance = kMostEdits + 1;
  for (const TunableDescription& description : kTunables) {
    size_t distance = edit_distance(misspelled, description.name, kMostEdits);
    if (distance < best_distance) {
      best_distance = distance;
      best = description.name;
    }
  }
  return best;
}

}  // namespace qpsock::config
