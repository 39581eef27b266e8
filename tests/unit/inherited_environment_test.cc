// exec keeps qpsock: the environment handed on carries LD_PRELOAD and QPSOCK_*.
#include "process/inherited_environment.h"

#include <gtest/gtest.h>

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
    setenv("QPSOCK_CONF", "/tmp/example.conf", 1);
    setenv("QPSOCK_LOG_LEVEL", "debug", 1);
    capture_inherited_environment();
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

}  // namespace
}  // namespace qpsock::process
