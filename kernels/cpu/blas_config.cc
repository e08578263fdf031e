#include "kernels/cpu/blas_config.h"

#include <cblas.h>
#include <cpuid.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessera::kernels {
namespace {

// The CPU's vendor string and display family (base family plus extended family).
struct CpuIdentity {
  std::string vendor;
  unsigned family = 0;
};

CpuIdentity Identify() {
  CpuIdentity id;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return id;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  id.vendor = vendor;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return id;
  const unsigned base = (eax >> 8) & 0xf;
  id.family = base == 0xf ? base + ((eax >> 20) & 0xff) : base;
  return id;
}

// Whether OpenBLAS's kernel set is one of its AVX-512 ones.
bool IsAvx512Core(const std::string& core) {
  return core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
}

}  // namespace

BlasConfig CurrentBlasConfig() {
  BlasConfig config;
  const char* core = openblas_get_corename();
  config.core = core == nullptr ? "" : core;
  config.threads = openblas_get_num_threads();
  return config;
}

void SetBlasThreads(int threads) { openblas_set_num_threads(threads); }

std::optional<std::string> PreferredBlasCore() {
  const CpuIdentity cpu = Identify();
  if (cpu.vendor == "AuthenticAMD" && cpu.family == 0x19 &&
      IsAvx512Core(CurrentBlasConfig().core)) {
    return "Zen";
  }
  return std::nullopt;
}

std::string UsePreferredBlasCore(char** argv) {
  if (const char* set = std::getenv("OPENBLAS_CORETYPE"); set != nullptr) {
    return absl::StrCat("OPENBLAS_CORETYPE=", set, " is set");
  }
  const std::optional<std::string> preferred = PreferredBlasCore();
  if (!preferred.has_value()) return "OpenBLAS's own pick stands on this CPU";
  setenv("OPENBLAS_CORETYPE", preferred->c_str(), 1);
  execv("/proc/self/exe", argv);
  const int error = errno;
  unsetenv("OPENBLAS_CORETYPE");
  return absl::StrCat("re-executing with OPENBLAS_CORETYPE=", *preferred,
                      " failed: ", std::strerror(error));
}

}  // namespace tessera::kernels
