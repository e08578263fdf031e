#include "core/host_memory.h"

#include <sys/mman.h>

#include <cstdint>

namespace tessera {

void AdviseHugePages(std::byte* data, size_t nbytes) {
#ifdef MADV_HUGEPAGE
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const uintptr_t last = (begin + nbytes) / kHugePageBytes * kHugePageBytes;
  if (nbytes < kHugePageBytes || first >= last) return;
  // A refusal (THP off, an old kernel) changes nothing, so its result is not looked at.
  madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void)data;
  (void)nbytes;
#endif
}

}  // namespace tessera
