/* A library whose constructor uses TCP sockets: it may run before qpsock's own
 * constructor, and certainly before main. */
#include "probe_common.h"

static int round_trip_done;

__attribute__((constructor)) static void use_sockets_early(void) {
  probe_round_trip(100000);
  round_trip_done = 1;
}

int constructor_round_trip_done(void) { return round_trip_done; }
