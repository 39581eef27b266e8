// keep_own_descriptor and place_own_descriptor: qpsock's descriptors leave
// every number below the soft RLIMIT_NOFILE to the application. Each case
// runs in a child of its own (EXPECT_EXIT): it changes the process's limits.
#include "common/own_descriptor.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "sockets/socket_lifecycle.h"

namespace qpsock {
namespace {

// Exits the child with the line that failed, so the parent says which.
#define REQUIRE(condition) \
  if (!(condition)) _exit(__LINE__ % 200 + 1)

void set_limits(rlim_t soft, rlim_t hard) {
  const rlimit limit{soft, hard};
  REQUIRE(setrlimit(RLIMIT_NOFILE, &limit) == 0);
}

rlimit limits() {
  rlimit limit{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &limit) == 0);
  return limit;
}

bool open_descriptor(int fd) { return fcntl(fd, F_GETFD) >= 0; }

int new_eventfd(int flags = EFD_CLOEXEC) { return eventfd(0, flags); }

TEST(OwnDescriptor, MovesAboveTheSoftLimitAndLeavesTheLimitAsItWas) {
  EXPECT_EXIT(
      {
        set_limits(64, 256);
        const int opened = new_eventfd();
        REQUIRE(opened >= 0 && opened < 64);
        errno = 1234;
        const int kept = keep_own_descriptor(opened);
        REQUIRE(kept >= 64 && kept < 256);
        REQUIRE(errno == 1234);
        REQUIRE(!open_descriptor(opened));  // the application gets its number back
        REQUIRE((fcntl(kept, F_GETFD) & FD_CLOEXEC) != 0);
        REQUIRE(limits().rlim_cur == 64 && limits().rlim_max == 256);
        // The application's next descriptor is the number it had before.
        REQUIRE(new_eventfd() == opened);
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(OwnDescriptor, KeepsTheCloseOnExecFlagAsItWas) {
  EXPECT_EXIT(
      {
        set_limits(64, 256);
        const int kept = keep_own_descriptor(new_eventfd(0));
        REQUIRE(kept >= 64);
        REQUIRE((fcntl(kept, F_GETFD) & FD_CLOEXEC) == 0);
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(OwnDescriptor, RefusesWhenNoRoomAboveASmallLimit) {
  EXPECT_EXIT(
      {
        set_limits(1024, 1024);  // what `ulimit -n 1024` sets
        const int opened = new_eventfd();
        errno = 0;
        REQUIRE(keep_own_descriptor(opened) == -1);
        REQUIRE(errno == EMFILE);
        REQUIRE(!open_descriptor(opened));
        REQUIRE(limits().rlim_cur == 1024);
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "RLIMIT_NOFILE 1024 \\(hard 1024\\): no room above");
}

// An upgrade does not begin for a second after a refusal: it would take
// several descriptors and fail halfway, and make its peer fail too.
TEST(OwnDescriptor, ARefusalHoldsUpgradesBackForASecond) {
  EXPECT_EXIT(
      {
        REQUIRE(!own_descriptors_recently_refused());
        set_limits(1024, 1024);
        REQUIRE(keep_own_descriptor(new_eventfd()) == -1);
        REQUIRE(own_descriptors_recently_refused());
        ::usleep(1'100'000);
        REQUIRE(!own_descriptors_recently_refused());
        note_descriptor_limit();  // the kernel's EMFILE, met in a setup
        REQUIRE(own_descriptors_recently_refused());
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// A JVM raises its soft limit to the hard one (MaxFDLimit): 4096 under the
// kernel's default.
TEST(OwnDescriptor, SharesTheLimitAJvmRaisesTo) {
  EXPECT_EXIT(
      {
        set_limits(4096, 4096);
        const int opened = new_eventfd();
        REQUIRE(keep_own_descriptor(opened) == opened);
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(OwnDescriptor, RefusesWhenItsRoomAboveIsFull) {
  EXPECT_EXIT(
      {
        set_limits(64, 66);
        const int first = keep_own_descriptor(new_eventfd());
        const int second = keep_own_descriptor(new_eventfd());
        REQUIRE(first >= 64 && second >= 64 && first != second);
        const int third = new_eventfd();
        REQUIRE(keep_own_descriptor(third) == -1 && errno == EMFILE);
        REQUIRE(!open_descriptor(third));
        REQUIRE(limits().rlim_cur == 64);
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "fill the room above the soft limit");
}

TEST(OwnDescriptor, SharesALargeLimitUntilHalfOfItIsUsed) {
  EXPECT_EXIT(
      {
        set_limits(20000, 20000);  // at least 4096: shared
        const int low = new_eventfd();
        REQUIRE(keep_own_descriptor(low) == low);
        const int high = fcntl(low, F_DUPFD_CLOEXEC, 10000);
        REQUIRE(high >= 10000);
        REQUIRE(keep_own_descriptor(high) == -1 && errno == EMFILE);
        REQUIRE(!open_descriptor(high) && open_descriptor(low));
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "holds half of its limit");
}

TEST(OwnDescriptor, PlacesALibrarysDescriptorInPlaceOrLeavesItOpen) {
  EXPECT_EXIT(
      {
        set_limits(64, 128);
        int field = new_eventfd();
        const int before = field;
        REQUIRE(place_own_descriptor(field) == 0);
        REQUIRE(field >= 64 && !open_descriptor(before));
        set_limits(64, 64);
        int refused = new_eventfd();
        const int unchanged = refused;
        REQUIRE(place_own_descriptor(refused) == -EMFILE);
        REQUIRE(refused == unchanged && open_descriptor(refused));
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// close_range and closefrom of the application's close around qpsock's
// own descriptors (there is no room above here, so they lie among the
// application's), but not around a number qpsock closed and the
// application reused.
TEST(OwnDescriptor, TheApplicationsCloseRangeAndClosefromLeaveOursOpen) {
  EXPECT_EXIT(
      {
        set_limits(4096, 4096);
        const int before = new_eventfd();
        const int ours = keep_own_descriptor(new_eventfd());
        const int after = new_eventfd();
        REQUIRE(before >= 0 && ours > before && after > ours);
        REQUIRE(next_own_descriptor(0, after) == ours);
        REQUIRE(next_own_descriptor(ours + 1, after) == -1);
        REQUIRE(sockets::close_range(static_cast<unsigned>(before), static_cast<unsigned>(after), 0) == 0);
        REQUIRE(!open_descriptor(before) && open_descriptor(ours) && !open_descriptor(after));
        // Ours closed, its number reused by the application: the application's.
        const int other_ours = keep_own_descriptor(new_eventfd());
        REQUIRE(close_descriptor(other_ours) == 0);
        const int reused = new_eventfd();
        REQUIRE(reused == other_ours || reused >= 0);
        const int last = new_eventfd();
        sockets::closefrom(before);
        REQUIRE(open_descriptor(ours) && !open_descriptor(reused) && !open_descriptor(last));
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(OwnDescriptor, PassesAFailedOpenThrough) {
  errno = EBADF;
  EXPECT_EQ(keep_own_descriptor(-1), -1);
  EXPECT_EQ(errno, EBADF);
}

}  // namespace
}  // namespace qpsock
