#include "stream/core_sharing_backoff.h"

namespace qpsock::stream {

void CoreSharingBackoff::on_yield(Clock::time_point began, Clock::time_point returned) {
  if (!applies_) return;
  const bool ran_another = returned - began > kRanAnotherThread;
  if (ran_another && last_ran_another_) spin_resumes_at_ = returned + kPause;
  last_ran_another_ = ran_another;
}

}  // namespace qpsock::stream
