#include "config/config_loader.h"

#include <string>

#include "common/log.h"
#include "common/startup_settings.h"
#include "config/config_file_reader.h"
#include "config/config_parser.h"

namespace qpsock::config {
namespace {

// initial-exec: see libc/next_symbols.cc.
__attribute__((tls_model("initial-exec"))) thread_local bool loading_on_this_thread = false;

// What a socket call made from inside the loading itself (a replacement
// malloc that uses sockets, say) gets: the kernel path, without re-entering
// the half-built static.
const Config& config_while_loading() {
  static const Config config = [] {
    Config kernel_only;
    kernel_only.set_fallback(Action::kernel, "config loading");
    return kernel_only;
  }();
  return config;
}

// A missing system-wide file just means "not configured"; a file the user
// named, or one that exists but cannot be read, is a policy we failed to get.
void use_config_file(const std::string& path, bool missing_means_built_in,
                     ConfigBuilder& builder) {
  ConfigFileContents contents = read_config_file(path);
  if (contents.status == ConfigFileContents::Status::read) {
    builder.use_file(path);
    parse_config_lines(contents.text, path, builder);
  } else if (contents.status == ConfigFileContents::Status::failed || !missing_means_built_in) {
    builder.use_unreadable_file(path, contents.error);
  }
}

const Config* load_process_config() {
  loading_on_this_thread = true;
  ParseResult result = load_config([](const char* name) { return startup_setting(name); });
  for (const std::string& diagnostic : result.diagnostics) {
    QPSOCK_LOG(warn, "%s", diagnostic.c_str());
  }
  // Never freed: connections may consult it until the very end of the
  // process, including from other libraries' destructors.
  const Config* config = new Config(std::move(result.config));
  loading_on_this_thread = false;
  return config;
}

}  // namespace

ParseResult load_config(const EnvironmentLookup& getenv_function,
                        std::string_view system_config_path) {
  ConfigBuilder builder;
  const char* named = getenv_function("QPSOCK_CONF");
  if (named == nullptr || *named == '\0') {
    use_config_file(std::string(system_config_path), true, builder);
  } else if (std::string_view(named) != "none") {
    use_config_file(named, false, builder);
  }
  apply_environment_overrides(getenv_function, builder);
  return std::move(builder).finish();
}

const Config& process_config() {
  if (loading_on_this_thread) [[unlikely]] {
    return config_while_loading();
  }
  // Built before the flag is set, so the path above never constructs anything.
  (void)config_while_loading();
  static const Config* const config = load_process_config();
  return *config;
}

}  // namespace qpsock::config
