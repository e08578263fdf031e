#ifndef TESSERA_KERNELS_CPU_BLAS_CONFIG_H_
#define TESSERA_KERNELS_CPU_BLAS_CONFIG_H_

#include <optional>
#include <string>

namespace tessera::kernels {

// The CPU backend's BLAS (OpenBLAS) as it runs in this process.
struct BlasConfig {
  std::string core;  // the kernel set OpenBLAS picked for this CPU, e.g. "Zen", "Cooperlake"
  int threads = 1;
};

BlasConfig CurrentBlasConfig();

// Sets the threads OpenBLAS runs a GEMM on; takes effect at once, whatever the environment said
// when the library loaded.
void SetBlasThreads(int threads);

// The kernel set to run on this CPU where OpenBLAS's own pick is slower; nullopt where its pick
// stands. On AMD family 19h with AVX-512 (Zen 4) OpenBLAS 0.3.21 picks its AVX-512 "Cooperlake"
// kernels, which run the single-thread GEMMs of a Linear layer ~25% slower there than its AVX2
// "Zen" ones (bench/RESULTS.md): Zen 4 executes a 512-bit FMA as two 256-bit halves.
std::optional<std::string> PreferredBlasCore();

// OpenBLAS picks its kernels when it loads, from OPENBLAS_CORETYPE or the CPU. Where the
// environment names none and PreferredBlasCore() differs from the pick, sets OPENBLAS_CORETYPE
// and re-executes this program with the same arguments (this does not return then). Returns the
// reason it did not re-execute otherwise: an operator's OPENBLAS_CORETYPE always stands.
std::string UsePreferredBlasCore(char** argv);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_CPU_BLAS_CONFIG_H_
