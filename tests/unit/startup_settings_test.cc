// qpsock's settings: the live environment's QPSOCK_* variables, and the ones
// the process started with where it has removed them since.
#include "common/startup_settings.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace qpsock {
namespace {

class StartupSettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("QPSOCK_SAME_HOST", "kernel", 1);
    setenv("QPSOCK_LOG_FILE", "/tmp/startup.log", 1);
    unsetenv("QPSOCK_SPIN_TIME");
    capture_startup_settings();
  }
  void TearDown() override {
    unsetenv("QPSOCK_SAME_HOST");
    unsetenv("QPSOCK_LOG_FILE");
    unsetenv("QPSOCK_SPIN_TIME");
  }
};

TEST_F(StartupSettingsTest, ASettingOutlivesTheProgramClearingItsEnvironment) {
  unsetenv("QPSOCK_SAME_HOST");
  ASSERT_NE(startup_setting("QPSOCK_SAME_HOST"), nullptr);
  EXPECT_STREQ(startup_setting("QPSOCK_SAME_HOST"), "kernel");
  unsetenv("QPSOCK_LOG_FILE");
  EXPECT_STREQ(startup_setting("QPSOCK_LOG_FILE"), "/tmp/startup.log");
}

TEST_F(StartupSettingsTest, AValueTheProgramSetsItselfIsTakenAsItIs) {
  setenv("QPSOCK_LOG_FILE", "/tmp/changed.log", 1);
  setenv("QPSOCK_SPIN_TIME", "1s", 1);
  EXPECT_STREQ(startup_setting("QPSOCK_LOG_FILE"), "/tmp/changed.log");
  EXPECT_STREQ(startup_setting("QPSOCK_SPIN_TIME"), "1s");
}

TEST_F(StartupSettingsTest, AVariableNeverSetIsNotASetting) {
  EXPECT_EQ(startup_setting("QPSOCK_SPIN_TIME"), nullptr);
}

TEST_F(StartupSettingsTest, ANameMatchesOnlyWhole) {
  EXPECT_EQ(startup_setting("QPSOCK_SAME"), nullptr);
  EXPECT_EQ(startup_setting("QPSOCK_SAME_HOST_"), nullptr);
}

TEST_F(StartupSettingsTest, EverySettingIsListedForExecutedPrograms) {
  bool same_host = false;
  bool log_file = false;
  for (size_t index = 0; index < startup_setting_count(); ++index) {
    std::string assignment = startup_setting_assignment(index);
    same_host = same_host || assignment == "QPSOCK_SAME_HOST=kernel";
    log_file = log_file || assignment == "QPSOCK_LOG_FILE=/tmp/startup.log";
    EXPECT_EQ(assignment.rfind("QPSOCK_", 0), 0u) << assignment;
  }
  EXPECT_TRUE(same_host);
  EXPECT_TRUE(log_file);
}

}  // namespace
}  // namespace qpsock
