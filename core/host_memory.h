#ifndef TESSERA_CORE_HOST_MEMORY_H_
#define TESSERA_CORE_HOST_MEMORY_H_

#include <cstddef>

namespace tessera {

// The size of a transparent huge page on x86-64 and arm64 (with 4 KiB base pages).
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Asks the kernel for transparent huge pages over the whole huge pages inside
// [data, data + nbytes) (MADV_HUGEPAGE, a hint that changes no byte and does nothing where THP is
// off): first touching a large tensor then faults once per 2 MiB rather than once per 4 KiB, which
// made most of the CPU time of receiving one into fresh memory.
void AdviseHugePages(std::byte* data, size_t nbytes);

}  // namespace tessera

#endif  // TESSERA_CORE_HOST_MEMORY_H_
