// libibverbs and librdmacm opened on first use (transport/verbs/verbs_library.h).
#include "transport/verbs/verbs_library.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

namespace qpsock::transport::verbs {
namespace {

TEST(VerbsLibrary, LoadsOnceForAllThreadsAndResolvesEveryFunction) {
  // Several first callers at once: each gets the one load's answer.
  // errno stays as each caller had it, whether it loaded or waited.
  std::vector<std::thread> threads;
  std::vector<char> loaded(4, 0), errno_kept(4, 0);
  for (size_t index = 0; index < loaded.size(); ++index)
    threads.emplace_back([&loaded, &errno_kept, index] {
      errno = 4242;
      loaded[index] = verbs_library_loaded();
      errno_kept[index] = errno == 4242;
    });
  for (std::thread& thread : threads) thread.join();
  for (size_t index = 0; index < loaded.size(); ++index) {
    ASSERT_TRUE(loaded[index]) << "libibverbs1 and librdmacm1 are installed here";
    EXPECT_TRUE(errno_kept[index]) << "caller " << index;
  }
  const VerbsLibrary& library = verbs_library();
#define QPSOCK_EXPECT_RESOLVED(name, version) EXPECT_NE(library.name, nullptr) << #name;
  QPSOCK_FOR_EACH_VERBS_FUNCTION(QPSOCK_EXPECT_RESOLVED)
  QPSOCK_FOR_EACH_RDMA_CM_FUNCTION(QPSOCK_EXPECT_RESOLVED)
#undef QPSOCK_EXPECT_RESOLVED
  EXPECT_STREQ(library.ibv_wc_status_str(IBV_WC_SUCCESS), "success");
  EXPECT_STREQ(library.rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED");
}

}  // namespace
}  // namespace qpsock::transport::verbs
