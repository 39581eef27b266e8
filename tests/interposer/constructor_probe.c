/* Linked with constructor_library: sockets from a constructor, then from main. */
#include "probe_common.h"

int constructor_round_trip_done(void);

int main(void) {
  PROBE_CHECK(constructor_round_trip_done());
  puts("constructor_probe: round trip in a library constructor before main ok");
  probe_round_trip(1000000);
  puts("constructor_probe: round trip in main ok");
  return 0;
}
