// Finding qpsock's executable segment, and mapping it at once in a child.
#include "common/own_code.h"

#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

#include "common/errno_guard.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

namespace qpsock {
namespace {

// Set once at load, before any fork of the program's.
uintptr_t code_start = 0;
size_t code_length = 0;

// dl_iterate_phdr's visit: the executable segment of the object whose
// segments hold this function (load bias + p_vaddr, whatever the first
// segment's address).
int find_own_code(dl_phdr_info* object, size_t, void*) {
  const auto here = reinterpret_cast<uintptr_t>(&locate_own_code);
  for (int index = 0; index < object->dlpi_phnum; ++index) {
    const ElfW(Phdr)& segment = object->dlpi_phdr[index];
    if (segment.p_type != PT_LOAD || (segment.p_flags & PF_X) == 0) continue;
    const uintptr_t start = object->dlpi_addr + segment.p_vaddr;
    const uintptr_t end = start + segment.p_memsz;
    if (here < start || here >= end) continue;
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    code_start = start & ~(page - 1);
    code_length = ((end + page - 1) & ~(page - 1)) - code_start;
    return 1;
  }
  return 0;
}

}  // namespace

void locate_own_code() {
  const ErrnoGuard errno_guard;
  dl_iterate_phdr(find_own_code, nullptr);
}

void map_own_code_in_child() {
  if (code_length == 0) return;
  const ErrnoGuard errno_guard;
  ::madvise(reinterpret_cast<void*>(code_start), code_length, MADV_POPULATE_READ);
}

}  // namespace qpsock
