#include "transport/verbs/verbs_options.h"

#include "stream/notification_window.h"
#include "stream/transport.h"

namespace qpsock::transport::verbs {

bool options_valid(const VerbsOptions& options) {
  return options.ring_size > 0 && options.max_read_length > 0 &&
         options.notification_capacity >= stream::kSmallestNotificationCapacity &&
         options.send_queue_depth >= 4 && options.max_outstanding_reads >= 1 &&
         options.max_slices >= stream::kMinimumSlicesPerPost;
}

}  // namespace qpsock::transport::verbs
