#include "config/environment_overrides.h"

#include <string_view>

#include "config/config_text.h"
#include "config/tunable_settings.h"

namespace qpsock::config {

void apply_environment_overrides(const EnvironmentLookup& getenv_function,
                                 ConfigBuilder& builder) {
  for (const TunableDescription& tunable : all_tunables()) {
    const char* value = getenv_function(tunable.environment_name);
    // "QPSOCK_X=" in a script means "not set", not "set to nothing".
    if (value != nullptr && *value != '\0') builder.set_tunable_from_environment(tunable, value);
  }
  if (const char* offload = getenv_function("QPSOCK_OFFLOAD");
      offload != nullptr && *offload != '\0') {
    std::string_view setting = offload;
    if (setting == "0") {
      builder.disable_offload();
    } else if (setting != "1") {
      builder.report("QPSOCK_OFFLOAD: " + quote_for_message(setting) +
                     " is not 0 or 1; ignored");
    }
  }
}

}  // namespace qpsock::config
