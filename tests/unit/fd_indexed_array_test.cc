// Per-fd arrays (common/fd_indexed_array.h): zeroed, bounded, and cheap for
// a forked child to read.
#include "common/fd_indexed_array.h"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace qpsock {
namespace {

// The element's word, read without a sanitizer's own look at its shadow
// memory (whose faults are no part of what is measured).
__attribute__((no_sanitize_address)) uint64_t read_plainly(const std::atomic<uint64_t>* element) {
  return *reinterpret_cast<const volatile uint64_t*>(element);
}

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

TEST(FdIndexedArray, ElementsStartZeroedAndBeyondTheCapacityThereAreNone) {
  FdIndexedArray<std::atomic<uint64_t>> array(2048);
  ASSERT_NE(array.at(0), nullptr);
  EXPECT_EQ(array.at(2047)->load(), 0u);
  EXPECT_EQ(array.at(2048), nullptr);
  EXPECT_EQ(array.at(-1), nullptr);
}

// A forking server's child reads the per-fd state its parent read (an fd
// no layer ever wrote, say): that must cost the child no page fault.
TEST(FdIndexedArray, AForkedChildReadsWhatItsParentReadWithoutAFault) {
  FdIndexedArray<std::atomic<uint64_t>> array(65536);
  const int fd = 40000;  // a page of its own, never written
  std::atomic<uint64_t>* element = array.at(fd);
  ASSERT_EQ(read_plainly(element), 0u);
  const pid_t child = fork();
  if (child == 0) {
    minor_faults();  // its own pages first (the stack this call writes)
    const long before = minor_faults();
    const uint64_t seen = read_plainly(element);
    const long after = minor_faults();
    _exit(seen == 0 && after == before ? 0 : 1);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace qpsock
