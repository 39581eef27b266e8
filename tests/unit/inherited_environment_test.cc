// exec keeps qpsock: the environment handed on carries LD_PRELOAD and QPSOCK_*.
#include "process/inherited_environment.h"

#include <gtest/gtest.h>

#include "upgrade/connection_registry.h"
#include "upgrade/inherited_streams.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace qpsock::process {
namespace {

std::vector<std::string> as_strings(char* const* envp) {
  std::vector<std::string> result;
  for (; *envp != nullptr; ++envp) result.emplace_back(*envp);
  return result;
}

// The library path captured is this test binary's own (dladdr of the engine code).
class InheritedEnvironmentTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The runner's own QPSOCK_* variables (QPSOCK_TEST_STAGES in CI) would be
    // captured as settings too: only the ones set here are counted below.
    std::vector<std::string> inherited;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const std::string text = *entry;
      if (text.rfind("QPSOCK_", 0) == 0) inherited.push_back(text.substr(0, text.find('=')));
    }
    for (const std::string& name : inherited) unsetenv(name.c_str());
    setenv("QPSOCK_CONF", "/tmp/example.conf", 1);
    setenv("QPSOCK_LOG_LEVEL", "debug", 1);
    // Not a setting: never handed on as one (the tests below count the settings).
    setenv("QPSOCK_INHERITED_STREAMS", "5", 1);
    capture_inherited_environment();
    unsetenv("QPSOCK_INHERITED_STREAMS");
  }
};

TEST_F(InheritedEnvironmentTest, AddsPreloadAndSettingsToAnEmptyEnvironment) {
  char* empty[] = {nullptr};
  InheritedEnvironment environment(empty);
  std::vector<std::string> result = as_strings(environment.get());
  ASSERT_EQ(result.size(), 3u);
  EXPECT_EQ(result[0].rfind("LD_PRELOAD=", 0), 0u);
  EXPECT_NE(result[0].find("qpsock_unit_tests"), std::string::npos);
  EXPECT_EQ(result[1], "QPSOCK_CONF=/tmp/example.conf");
  EXPECT_EQ(result[2], "QPSOCK_LOG_LEVEL=debug");
}

TEST_F(InheritedEnvironmentTest, PrependsToAnotherPreloadAndKeepsIt) {
  std::string other = "LD_PRELOAD=/usr/lib/libother.so";
  std::string path = "PATH=/usr/bin";
  char* envp[] = {path.data(), other.data(), nullptr};
  InheritedEnvironment environment(envp);
  std::vector<std::string> result = as_strings(environment.get());
  ASSERT_GE(result.size(), 2u);
  EXPECT_EQ(result[0].rfind("LD_PRELOAD=", 0), 0u);
  EXPECT_NE(result[0].find(" /usr/lib/libother.so"), std::string::npos);
  EXPECT_EQ(result[1], path);
  EXPECT_EQ(std::count_if(result.begin(), result.end(),
                          [](const std::string& entry) { return entry.rfind("LD_PRELOAD=", 0) == 0; }),
            1);
}

TEST_F(InheritedEnvironmentTest, LeavesACompleteEnvironmentUntouched) {
  std::string preload = "LD_PRELOAD=/some/where/qpsock_unit_tests";
  std::string configuration = "QPSOCK_CONF=/other.conf";
  std::string level = "QPSOCK_LOG_LEVEL=off";
  char* envp[] = {preload.data(), configuration.data(), level.data(), nullptr};
  InheritedEnvironment environment(envp);
  // The program's own choice of a setting wins over the one qpsock started with.
  EXPECT_EQ(environment.get(), envp);
}

TEST_F(InheritedEnvironmentTest, ANullEnvironmentIsTreatedAsEmpty) {
  InheritedEnvironment environment(nullptr);
  EXPECT_EQ(as_strings(environment.get()).size(), 3u);
}

TEST_F(InheritedEnvironmentTest, TheInheritedStreamsNamedNowReplaceTheOnesTheEnvironmentHad) {
  std::string preload = "LD_PRELOAD=/some/where/qpsock_unit_tests";
  std::string configuration = "QPSOCK_CONF=/other.conf";
  std::string level = "QPSOCK_LOG_LEVEL=off";
  std::string stale = "QPSOCK_INHERITED_STREAMS=11,12";
  char* envp[] = {preload.data(), configuration.data(), stale.data(), level.data(), nullptr};
  upgrade::InheritedStreamsMarker marker;
  EXPECT_EQ(marker.assignment(), nullptr);
  marker.add(4242);
  marker.add(77);
  InheritedEnvironment environment(envp, marker.assignment());
  const std::vector<std::string> result = as_strings(environment.get());
  EXPECT_EQ(result, (std::vector<std::string>{preload, configuration, level,
                                              "QPSOCK_INHERITED_STREAMS=4242,77"}));
  // With none named now, the stale list goes too.
  InheritedEnvironment without(envp, nullptr);
  EXPECT_EQ(as_strings(without.get()), (std::vector<std::string>{preload, configuration, level}));
}

TEST_F(InheritedEnvironmentTest, TheMarkerNamesEverySocketItIsGiven) {
  upgrade::InheritedStreamsMarker marker;
  // 2000 of the longest numbers: the marker's memory grows several times.
  for (uint64_t inode = 1; inode <= 2000; ++inode) marker.add(18446744073709551615ull - inode);
  EXPECT_EQ(marker.count(), 2000u);
  const std::string text = marker.assignment();
  EXPECT_EQ(std::count(text.begin(), text.end(), ','), 1999);
  EXPECT_EQ(text.rfind("QPSOCK_INHERITED_STREAMS=18446744073709551614,", 0), 0u);
  EXPECT_EQ(text.substr(text.size() - 21), ",18446744073709549615");
}

// execve refuses an environment string of more than 128 KiB (E2BIG): the
// marker stops short of it.
TEST_F(InheritedEnvironmentTest, TheMarkerStaysWithinWhatExecTakes) {
  upgrade::InheritedStreamsMarker marker;
  for (uint64_t inode = 1; inode <= 10000; ++inode) marker.add(18446744073709551615ull - inode);
  const std::string text = marker.assignment();
  EXPECT_LT(text.size() + 1, 128u * 1024u);
  EXPECT_GT(marker.count(), 6000u);
  EXPECT_LT(marker.count(), 10000u);
}

// The new program's side: every socket the list names, however many, gets a
// Connection that refuses its calls; the others stay plain.
TEST(InheritedStreamsAdoption, EverySocketNamedIsRefusedAndNoOther) {
  constexpr int kPairs = 50;
  int pairs[kPairs][2];
  upgrade::InheritedStreamsMarker marker;
  for (auto& pair : pairs) {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    struct stat status{};
    ASSERT_EQ(fstat(pair[0], &status), 0);
    marker.add(status.st_ino);
  }
  const std::string assignment = marker.assignment();
  const std::string list = assignment.substr(assignment.find('=') + 1);
  ASSERT_EQ(setenv(upgrade::kInheritedStreamsName, list.c_str(), 1), 0);
  upgrade::adopt_inherited_streams();
  EXPECT_EQ(getenv(upgrade::kInheritedStreamsName), nullptr) << "the variable stays";
  int refused = 0, plain = 0;
  for (auto& pair : pairs) {
    const auto named = upgrade::find_connection(pair[0]);
    refused += named != nullptr && named->inherited_stream() ? 1 : 0;
    plain += upgrade::find_connection(pair[1]) == nullptr ? 1 : 0;
    upgrade::detach_connection(pair[0]);
    close(pair[0]);
    close(pair[1]);
  }
  EXPECT_EQ(refused, kPairs);
  EXPECT_EQ(plain, kPairs);
}

}  // namespace
}  // namespace qpsock::process
