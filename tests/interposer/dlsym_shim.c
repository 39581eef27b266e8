/* A library that interposes dlsym itself and, inside it, calls read and close:
 * the situation of a replacement malloc that does I/O while qpsock resolves
 * its next symbols. qpsock must answer those calls (with the kernel's EBADF)
 * instead of recursing into dlsym forever. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static __thread int inside;
static int nested_calls;
static int nested_wrong_errno;

void* dlsym(void* handle, const char* name) {
  static void* (*real_dlsym)(void*, const char*);
  if (real_dlsym == NULL) real_dlsym = (void* (*)(void*, const char*))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (real_dlsym == NULL) real_dlsym = (void* (*)(void*, const char*))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  if (!inside) {
    inside = 1;
    char byte;
    errno = 0;
    if (read(-1, &byte, 1) != -1 || errno != EBADF) ++nested_wrong_errno;
    errno = 0;
    if (close(-1) != -1 || errno != EBADF) ++nested_wrong_errno;
    ++nested_calls;
    inside = 0;
  }
  return real_dlsym(handle, name);
}

__attribute__((destructor)) static void report(void) {
  char line[128];
  int length = snprintf(line, sizeof(line), "dlsym_shim: nested calls %d, wrong results %d\n",
                        nested_calls, nested_wrong_errno);
  if (write(2, line, (size_t)length) < 0) return;
}
