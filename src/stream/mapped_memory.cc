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

namespace {

size_t page_rounded(size_t length) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (length + page - 1) / page * page;
}

}  // namespace

int MappedMemory::map(size_t length) {
  release();
  if (length == 0) return -EINVAL;
  return adopt(::mmap(nullptr, page_rounded(length), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
               length);
}

int MappedMemory::map_shared(int fd, size_t offset, size_t length, bool writable) {
  release();
  if (length == 0) return -EINVAL;
  const int protection = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  return adopt(::mmap(nullptr, page_rounded(length), protection, MAP_SHARED, fd,
                      static_cast<off_t>(offset)),
               length);
}

void MappedMemory::borrow(std::byte* data, size_t length) {
  release();
  data_ = data;
  size_ = length;
}

int MappedMemory::adopt(void* mapping, size_t length) {
  if (mapping == MAP_FAILED) return -errno;
  data_ = static_cast<std::byte*>(mapping);
  size_ = length;
  mapped_length_ = page_rounded(length);
  return 0;
}

void MappedMemory::release() {
  if (data_ != nullptr && mapped_length_ != 0) ::munmap(data_, mapped_length_);
  data_ = nullptr;
  size_ = 0;
  mapped_length_ = 0;
}

}  // namespace qpsock::stream
