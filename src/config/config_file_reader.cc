#include "config/config_file_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/own_descriptor.h"
#include "config/config_text.h"
#include "config/value_syntax.h"
#include "libc/next_symbols.h"

namespace qpsock::config {
namespace {

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) close_descriptor(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// strerror's text may be translated to the host program's locale and is not
// thread-safe; the untranslated description is what a log reader expects.
std::string describe_errno(int error) {
  const char* description = strerrordesc_np(error);
  return description != nullptr ? description : "error " + decimal(static_cast<unsigned>(error));
}

ConfigFileContents failure(std::string why) {
  return {ConfigFileContents::Status::failed, {}, std::move(why)};
}

}  // namespace

ConfigFileContents read_config_file(const std::string& path) {
  // O_NONBLOCK: a FIFO in the config's place must not hang the program in open.
  FileDescriptor file(next::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (file.get() < 0) {
    int error = errno;
    if (error == ENOENT || error == ENOTDIR) {
      return {ConfigFileContents::Status::missing, {}, describe_errno(error)};
    }
    return failure(describe_errno(error));
  }
  struct stat status;
  if (fstat(file.get(), &status) != 0) return failure(describe_errno(errno));
  if (!S_ISREG(status.st_mode)) return failure("not a regular file");

  ConfigFileContents contents;
  contents.status = ConfigFileContents::Status::read;
  char buffer[16384];
  while (true) {
    ssize_t count = next::read(file.get(), buffer, sizeof(buffer));
    if (count < 0) {
      if (errno == EINTR) continue;
      return failure(describe_errno(errno));
    }
    if (count == 0) break;
    if (contents.text.size() + static_cast<size_t>(count) > kLargestConfigFile) {
      return failure("larger than the " + format_size(kLargestConfigFile) + " limit");
    }
    contents.text.append(buffer, static_cast<size_t>(count));
  }
  return contents;
}

}  // namespace qpsock::config
