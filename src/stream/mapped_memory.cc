#include "stream/mapped_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace qpsock::stream {

MappedMemory::~MappedMemory() { release(); }

MappedMemory::MappedMemory(MappedMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_length_(std::exchange(other.mapped_length_, 0)) {}

MappedMemory& MappedMemory::operator=(MappedMemory&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_length_ = std::exchange(other.mapped_length_, 0);
  }
  return *this;
}

int MappedMemory::map(size_t length) {
  release();
  if (length == 0) return -EINVAL;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t rounded = (length + page - 1) / page * page;
  void* mapping = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                         -1, 0);
  if (mapping == MAP_FAILED) return -errno;
  data_ = static_cast<std::byte*>(mapping);
  size_ = length;
  mapped_length_ = rounded;
  return 0;
}

void MappedMemory::release() {
  if (data_ != nullptr) ::munmap(data_, mapped_length_);
  data_ = nullptr;
  size_ = 0;
  mapped_length_ = 0;
}

}  // namespace qpsock::stream
