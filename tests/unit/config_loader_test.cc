// Where the config comes from (QPSOCK_CONF, the system file, the built-in
// policy) and the QPSOCK_* environment overrides.
#include "config/config_loader.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "config/config_file_reader.h"

namespace qpsock::config {
namespace {

using std::chrono::microseconds;

// A scratch directory, removed with everything in it.
class ScratchDirectory {
 public:
  ScratchDirectory() {
    char pattern[] = "/tmp/qpsock-config-test-XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~ScratchDirectory() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;

  std::string write(const std::string& name, std::string_view contents) const {
    std::string file = path_ + "/" + name;
    FILE* stream = std::fopen(file.c_str(), "wb");
    std::fwrite(contents.data(), 1, contents.size(), stream);
    std::fclose(stream);
    return file;
  }
  std::string path(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A stand-in environment.
class FakeEnvironment {
 public:
  FakeEnvironment& set(const std::string& name, const std::string& value) {
    variables_[name] = value;
    return *this;
  }
  EnvironmentLookup lookup() const {
    return [this](const char* name) -> const char* {
      auto found = variables_.find(name);
      return found == variables_.end() ? nullptr : found->second.c_str();
    };
  }

 private:
  std::map<std::string, std::string> variables_;
};

Decision decide_client(const Config& config, const char* peer, uint16_t port) {
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_port = htons(40000);
  inet_pton(AF_INET, "10.0.0.1", &local.sin_addr);
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(port);
  inet_pton(AF_INET, peer, &remote.sin_addr);
  return config.decide(reinterpret_cast<sockaddr*>(&local), reinterpret_cast<sockaddr*>(&remote),
                       Role::client);
}

class ConfigLoader : public ::testing::Test {
 protected:
  ParseResult load() { return load_config(environment.lookup(), system_file); }

  ScratchDirectory directory;
  FakeEnvironment environment;
  // Absent unless a test writes it.
  std::string system_file = directory.path("system.conf");
};

TEST_F(ConfigLoader, NothingConfiguredMeansTheBuiltInPolicy) {
  ParseResult result = load();
  EXPECT_TRUE(result.diagnostics.empty());
  EXPECT_EQ(result.config.source(), "built-in default");
  Decision decision = decide_client(result.config, "192.0.2.1", 80);
  EXPECT_EQ(decision.action, Action::offload);
  EXPECT_EQ(decision.reason, "built-in default");
  EXPECT_EQ(result.config.tunables(), Tunables{});
}

TEST_F(ConfigLoader, SystemFileIsUsedWhenPresent) {
  directory.write("system.conf", "kernel both any 22\nspin_time = 1ms\n");
  for (const char* unset_spelling : std::initializer_list<const char*>{nullptr, ""}) {
    if (unset_spelling != nullptr) environment.set("QPSOCK_CONF", unset_spelling);
    ParseResult result = load();
    EXPECT_TRUE(result.diagnostics.empty());
    EXPECT_EQ(result.config.source(), system_file);
    EXPECT_EQ(decide_client(result.config, "192.0.2.1", 22).reason, system_file + ":1");
    EXPECT_EQ(decide_client(result.config, "192.0.2.1", 80).reason, "no rule matched");
    EXPECT_EQ(result.config.tunables().spin_time, microseconds{1000});
  }
}

TEST_F(ConfigLoader, QpsockConfNamesTheFile) {
  directory.write("system.conf", "kernel both any\n");
  std::string mine = directory.write("mine.conf", "offload client 192.0.2.0/24\n");
  environment.set("QPSOCK_CONF", mine);
  ParseResult result = load();
  EXPECT_TRUE(result.diagnostics.empty());
  EXPECT_EQ(result.config.source(), mine);
  EXPECT_EQ(decide_client(result.config, "192.0.2.1", 80).reason, mine + ":1");
}

TEST_F(ConfigLoader, QpsockConfNoneSkipsEveryFile) {
  directory.write("system.conf", "kernel both any\n");
  environment.set("QPSOCK_CONF", "none");
  ParseResult result = load();
  EXPECT_TRUE(result.diagnostics.empty());
  EXPECT_EQ(decide_client(result.config, "192.0.2.1", 80).reason, "built-in default");
}

TEST_F(ConfigLoader, MissingNamedFileKeepsEverythingOnTheKernel) {
  std::string missing = directory.path("missing.conf");
  environment.set("QPSOCK_CONF", missing);
  ParseResult result = load();
  ASSERT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(result.diagnostics[0], "cannot read config " + missing +
                                       ": No such file or directory; every connection stays on "
                                       "the kernel");
  Decision decision = decide_client(result.config, "192.0.2.1", 80);
  EXPECT_EQ(decision.action, Action::kernel);
  EXPECT_EQ(decision.reason, "cannot read " + missing);
  EXPECT_EQ(result.config.source(), "cannot read " + missing);
}

TEST_F(ConfigLoader, UnreadableNamedFileKeepsEverythingOnTheKernel) {
  // A directory: (root reads any file, so permissions cannot make one unreadable here).
  environment.set("QPSOCK_CONF", directory.path(""));
  ParseResult result = load();
  ASSERT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(result.diagnostics[0], "cannot read config " + directory.path("") +
                                       ": not a regular file; every connection stays on the "
                                       "kernel");
  EXPECT_EQ(decide_client(result.config, "192.0.2.1", 80).action, Action::kernel);
}

TEST_F(ConfigLoader, UnreadableSystemFileKeepsEverythingOnTheKernel) {
  mkdir(system_file.c_str(), 0755);
  ParseResult result = load();
  ASSERT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(decide_client(result.config, "192.0.2.1", 80).action, Action::kernel);
}

TEST_F(ConfigLoader, PathThroughAFileIsMissing) {
  std::string file = directory.write("plain", "");
  environment.set("QPSOCK_CONF", file + "/below");
  ParseResult result = load();
  ASSERT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(result.diagnostics[0], "cannot read config " + file +
                                       "/below: Not a directory; every connection stays on the "
                                       "kernel");
}

TEST_F(ConfigLoader, FifoIsRefusedWithoutBlocking) {
  std::string fifo = directory.path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ConfigFileContents contents = read_config_file(fifo);
  EXPECT_EQ(contents.status, ConfigFileContents::Status::failed);
  EXPECT_EQ(contents.error, "not a regular file");
}

TEST_F(ConfigLoader, OversizedFileIsRefused) {
  std::string big = directory.write("big.conf", std::string(kLargestConfigFile + 1, '#'));
  environment.set("QPSOCK_CONF", big);
  ParseResult result = load();
  ASSERT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(result.diagnostics[0], "cannot read config " + big +
                                       ": larger than the 1M limit; every connection stays on "
                                       "the kernel");
  std::string comment_lines;
  while (comment_lines.size() < kLargestConfigFile) comment_lines += "# padding\n";
  comment_lines.resize(kLargestConfigFile);
  std::string largest = directory.write("largest.conf", comment_lines);
  environment.set("QPSOCK_CONF", largest);
  EXPECT_TRUE(load().diagnostics.empty());
}

TEST_F(ConfigLoader, FileDiagnosticsCarryThePath) {
  std::string file = directory.write("bad.conf", "\nofload both any\n");
  environment.set("QPSOCK_CONF", file);
  ParseResult result = load();
  ASSERT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(result.diagnostics[0],
            file + ":2: unknown action 'ofload' (expected offload or kernel); line ignored");
}

TEST_F(ConfigLoader, EnvironmentOverridesEveryTunable) {
  environment.set("QPSOCK_INLINE_SIZE", "64")
      .set("QPSOCK_RENDEZVOUS_THRESHOLD", "256K")
      .set("QPSOCK_RING_SIZE", "8M")
      .set("QPSOCK_EAGER_CHUNK", "128K")
      .set("QPSOCK_SPIN_TIME", "0")
      .set("QPSOCK_UPGRADE_TIMEOUT", "30s")
      .set("QPSOCK_SAME_HOST", "kernel");
  ParseResult result = load();
  EXPECT_TRUE(result.diagnostics.empty());
  const Tunables& tunables = result.config.tunables();
  EXPECT_EQ(tunables.inline_size, 64u);
  EXPECT_EQ(tunables.rendezvous_threshold, 256u << 10);
  EXPECT_EQ(tunables.ring_size, 8u << 20);
  EXPECT_EQ(tunables.eager_chunk, 128u << 10);
  EXPECT_EQ(tunables.spin_time, microseconds{0});
  EXPECT_EQ(tunables.upgrade_timeout, std::chrono::seconds{30});
  EXPECT_EQ(tunables.same_host, SameHost::kernel);
}

TEST_F(ConfigLoader, EnvironmentWinsOverTheFileSilently) {
  std::string file = directory.write("t.conf", "spin_time = 5us\ninline_size = 32\n");
  environment.set("QPSOCK_CONF", file).set("QPSOCK_SPIN_TIME", "9us");
  ParseResult result = load();
  EXPECT_TRUE(result.diagnostics.empty());
  EXPECT_EQ(result.config.tunables().spin_time, microseconds{9});
  EXPECT_EQ(result.config.tunables().inline_size, 32u);
}

TEST_F(ConfigLoader, BadEnvironmentValuesAreReportedAndIgnored) {
  std::string file = directory.write("t.conf", "ring_size = 2M\n");
  environment.set("QPSOCK_CONF", file)
      .set("QPSOCK_RING_SIZE", "100K")
      .set("QPSOCK_SPIN_TIME", "20")
      .set("QPSOCK_SAME_HOST", "SHM");
  ParseResult result = load();
  ASSERT_EQ(result.diagnostics.size(), 3u);
  EXPECT_EQ(result.diagnostics[0],
            "QPSOCK_RING_SIZE: '100K' is not a power of two; 2M from " + file + ":1 kept");
  EXPECT_EQ(result.diagnostics[1],
            "QPSOCK_SPIN_TIME: '20' needs a unit (us, ms or s); default 20us kept");
  EXPECT_EQ(result.diagnostics[2],
            "QPSOCK_SAME_HOST: 'SHM' is not shm, rdma or kernel; default shm kept");
  EXPECT_EQ(result.config.tunables().ring_size, 2u << 20);
  EXPECT_EQ(result.config.tunables().same_host, SameHost::shm);
}

TEST_F(ConfigLoader, EmptyEnvironmentValuesMeanUnset) {
  environment.set("QPSOCK_RING_SIZE", "").set("QPSOCK_OFFLOAD", "");
  ParseResult result = load();
  EXPECT_TRUE(result.diagnostics.empty());
  EXPECT_EQ(result.config.tunables(), Tunables{});
  EXPECT_EQ(decide_client(result.config, "192.0.2.1", 80).action, Action::offload);
}

TEST_F(ConfigLoader, EagerChunkIsCheckedAfterTheEnvironment) {
  // The file's ring is too small for its chunk, the environment's is not.
  std::string file = directory.write("t.conf", "ring_size = 64K\neager_chunk = 64K\n");
  environment.set("QPSOCK_CONF", file).set("QPSOCK_RING_SIZE", "1M");
  ParseResult result = load();
  EXPECT_TRUE(result.diagnostics.empty());
  EXPECT_EQ(result.config.tunables().eager_chunk, 64u << 10);

  // The environment's chunk is too big for the file's ring.
  environment.set("QPSOCK_RING_SIZE", "").set("QPSOCK_EAGER_CHUNK", "128K");
  std::string small_ring = directory.write("small.conf", "ring_size = 128K\n");
  environment.set("QPSOCK_CONF", small_ring);
  ParseResult too_big = load();
  ASSERT_EQ(too_big.diagnostics.size(), 1u);
  EXPECT_EQ(too_big.diagnostics[0],
            "QPSOCK_EAGER_CHUNK: 128K is more than half of ring_size 128K; default 64K used");
  EXPECT_EQ(too_big.config.tunables().eager_chunk, 64u << 10);
}

TEST_F(ConfigLoader, OffloadZeroKeepsEverythingOnTheKernel) {
  std::string file = directory.write("t.conf", "offload both any\n");
  environment.set("QPSOCK_CONF", file).set("QPSOCK_OFFLOAD", "0");
  ParseResult result = load();
  EXPECT_TRUE(result.diagnostics.empty());
  EXPECT_TRUE(result.config.offload_disabled());
  Decision decision = decide_client(result.config, "192.0.2.1", 80);
  EXPECT_EQ(decision.action, Action::kernel);
  EXPECT_EQ(decision.reason, "QPSOCK_OFFLOAD=0");
}

TEST_F(ConfigLoader, OffloadOneAndBadValues) {
  environment.set("QPSOCK_OFFLOAD", "1");
  EXPECT_TRUE(load().diagnostics.empty());
  EXPECT_EQ(decide_client(load().config, "192.0.2.1", 80).action, Action::offload);
  environment.set("QPSOCK_OFFLOAD", "no");
  ParseResult result = load();
  ASSERT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(result.diagnostics[0], "QPSOCK_OFFLOAD: 'no' is not 0 or 1; ignored");
  EXPECT_EQ(decide_client(result.config, "192.0.2.1", 80).action, Action::offload);
}

TEST_F(ConfigLoader, EnvironmentOverridesApplyEvenWithoutAReadableFile) {
  environment.set("QPSOCK_CONF", directory.path("missing.conf")).set("QPSOCK_SPIN_TIME", "1ms");
  ParseResult result = load();
  EXPECT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(result.config.tunables().spin_time, microseconds{1000});
}

TEST(ConfigProcess, LoadsOnceAndStaysPut) {
  const Config& first = process_config();
  const Config& second = process_config();
  EXPECT_EQ(&first, &second);
}

}  // namespace
}  // namespace qpsock::config
