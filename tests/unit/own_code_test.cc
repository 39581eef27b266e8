// qpsock's code mapped in a forked child at once (common/own_code.h).
#include "common/own_code.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

namespace qpsock {
namespace {

TEST(OwnCode, MappingItInAChildLeavesErrnoAndTheChildRunsOn) {
  locate_own_code();
  const pid_t child = fork();
  if (child == 0) {
    errno = EAGAIN;
    map_own_code_in_child();
    _exit(errno == EAGAIN ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace qpsock
