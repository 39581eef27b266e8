// Reads a config file into memory through the real libc functions (the
// normal names are interposed by qpsock itself).
#pragma once

#include <cstddef>
#include <string>

namespace qpsock::config {

// A config is a few dozen lines; anything this large is not one.
inline constexpr size_t kLargestConfigFile = size_t{1} << 20;

struct ConfigFileContents {
  enum class Status { read, missing, failed };
  Status status = Status::failed;
  std::string text;   // when read
  std::string error;  // when missing or failed: why, e.g. "Permission denied"
};

ConfigFileContents read_config_file(const std::string& path);

}  // namespace qpsock::config
