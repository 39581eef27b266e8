// The statistics file itself: where it goes, its name, mode and header, the
// /proc parsing behind the name, and the runtime directory choice.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <sys/statfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/startup_settings.h"
#include "stats/process_identity.h"
#include "stats/registry.h"
#include "stats/runtime_directory.h"
#include "stats/stats_file_format.h"
#include "stats_test_support.h"

namespace qpsock::stats {
namespace {

using testing::as_sockaddr;
using testing::ipv4;
using testing::TemporaryDirectory;

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST(StatsFormat, StartTimeIsField22EvenWithOddCommandNames) {
  const char* stat = "1234 (a) b) (c) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 "
                     "1000 200";
  EXPECT_EQ(format::parse_start_time(stat), 987654u);
  EXPECT_EQ(format::parse_start_time("garbage"), 0u);
  EXPECT_EQ(format::parse_start_time("1 (x) S 1 2"), 0u);
}

TEST(StatsFormat, ThisProcessStartTimeMatchesProc) {
  const ProcessIdentity identity = identify_this_process();
  EXPECT_EQ(identity.pid, getpid());
  EXPECT_NE(identity.start_time, 0u);
  EXPECT_EQ(identity.start_time, process_start_time(getpid()));
  std::string comm = read_text("/proc/self/comm");
  if (!comm.empty() && comm.back() == '\n') comm.pop_back();
  EXPECT_EQ(identity.program, comm);
  EXPECT_EQ(process_start_time(0x7ffffff0), 0u);  // no such process
}

TEST(StatsFile, NamedByPidAndStartTimeWithMode0600AndAHeader) {
  TemporaryDirectory directory;
  Registry registry(directory.path(), 16);
  const sockaddr_in address = ipv4("127.0.0.1", 80);
  ASSERT_NE(registry.open(as_sockaddr(address), as_sockaddr(address), Role::server, Path::kernel, "d", "r"), 0u);
  const ProcessIdentity identity = identify_this_process();
  const std::string expected = std::string(directory.path()) + "/" + std::to_string(getpid()) + "-" +
                               std::to_string(identity.start_time) + format::kFileSuffix;
  EXPECT_EQ(registry.file_path(), expected);
  struct stat status {};
  ASSERT_EQ(stat(expected.c_str(), &status), 0);
  EXPECT_EQ(status.st_mode & 0777, 0600u);
  EXPECT_EQ(static_cast<size_t>(status.st_size), format::file_size(16));
  const format::FileHeader* header = registry.header();
  EXPECT_EQ(header->magic, format::kMagic);
  EXPECT_EQ(header->version, format::kVersion);
  EXPECT_EQ(header->slot_count, 16u);
  EXPECT_EQ(header->slot_size, sizeof(format::Slot));
  EXPECT_EQ(header->pid, getpid());
  EXPECT_EQ(header->start_time, identity.start_time);
  EXPECT_STREQ(header->program, identity.program);
  EXPECT_EQ(header->used_slots.load(), 1u);
  // Only the final file: the temporary one was renamed.
  EXPECT_EQ(directory.files().size(), 1u);
}

TEST(StatsRuntimeDirectory, TheVariableWinsAndIsMadePrivate) {
  TemporaryDirectory parent;
  const std::string chosen = std::string(parent.path()) + "/stats";
  const char* saved = getenv(kStatDirectoryVariable);
  const std::string saved_value = saved ? saved : "";
  setenv(kStatDirectoryVariable, chosen.c_str(), 1);
  capture_startup_settings();  // as if the process had started with it
  char path[256];
  EXPECT_TRUE(prepare_runtime_directory(path, sizeof(path)));
  EXPECT_EQ(chosen, path);
  struct stat status {};
  ASSERT_EQ(stat(chosen.c_str(), &status), 0);
  EXPECT_EQ(status.st_mode & 0777, 0700u);
  if (saved) setenv(kStatDirectoryVariable, saved_value.c_str(), 1); else unsetenv(kStatDirectoryVariable);
  capture_startup_settings();
}

// A statistics file on a disk costs the first connection milliseconds: a
// directory in memory is taken before one on a disk.
TEST(StatsRuntimeDirectory, WithoutTheVariableTheFirstUsableInMemory) {
  const char* saved = getenv(kStatDirectoryVariable);
  const std::string saved_value = saved ? saved : "";
  unsetenv(kStatDirectoryVariable);
  capture_startup_settings();
  char path[256];
  ASSERT_TRUE(prepare_runtime_directory(path, sizeof(path)));
  const std::string user = std::to_string(geteuid());
  const std::string chosen = path;
  EXPECT_TRUE(chosen == format::kSystemDirectory || chosen == "/dev/shm/qpsock-" + user ||
              chosen == "/tmp/qpsock-" + user)
      << chosen;
  constexpr decltype(statfs::f_type) kTmpfsMagic = 0x01021994;
  struct statfs shared_memory {}, filesystem {};
  if (statfs("/dev/shm", &shared_memory) == 0 && shared_memory.f_type == kTmpfsMagic) {
    ASSERT_EQ(statfs(path, &filesystem), 0);
    EXPECT_EQ(filesystem.f_type, kTmpfsMagic) << chosen << " is not in memory";
  }
  if (saved) setenv(kStatDirectoryVariable, saved_value.c_str(), 1);
  capture_startup_settings();
}

}  // namespace
}  // namespace qpsock::stats
