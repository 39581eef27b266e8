// Page-aligned memory owned by one object (rings, staging and bounce buffers):
// page alignment keeps registrations tight and nothing else shares the pages,
// so a registration never pins an unrelated allocation. Anonymous private
// memory, a shared mapping of a file, or a part of a mapping that another
// object owns and outlives this one (a channel's ring in the shm link's
// pool, which the peer process maps too).
#pragma once

#include <cstddef>
#include <span>

namespace qpsock::stream {

class MappedMemory {
 public:
  MappedMemory() = default;
  ~MappedMemory();
  MappedMemory(MappedMemory&& other) noexcept;
  MappedMemory& operator=(MappedMemory&& other) noexcept;
  MappedMemory(const MappedMemory&) = delete;
  MappedMemory& operator=(const MappedMemory&) = delete;

  // Maps `length` zeroed bytes (rounded up to pages); 0 or -errno.
  int map(size_t length);
  // Maps `length` bytes of `fd` from `offset` (a multiple of the page size),
  // MAP_SHARED, read-write or read-only; 0 or -errno. The fd may be closed
  // afterwards: the mapping keeps the file alive.
  int map_shared(int fd, size_t offset, size_t length, bool writable = true);
  // Takes [data, data + length), page-aligned, mapped by another owner:
  // released without unmapping.
  void borrow(std::byte* data, size_t length);

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<std::byte> bytes() const { return {data_, size_}; }
  bool empty() const { return data_ == nullptr; }

 private:
  void release();
  int adopt(void* mapping, size_t length);

  std::byte* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_length_ = 0;  // 0 for borrowed memory
};

}  // namespace qpsock::stream
