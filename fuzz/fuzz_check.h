// What the fuzz targets share: a failed property aborts the run (libFuzzer then saves the input).
#ifndef TESSERA_FUZZ_FUZZ_CHECK_H_
#define TESSERA_FUZZ_FUZZ_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "absl/strings/string_view.h"

// Aborts naming the property `what` when `ok` is false.
#define FUZZ_CHECK(ok, what)                                                              \
  do {                                                                                    \
    if (!(ok)) {                                                                          \
      std::fprintf(stderr, "%s:%d: property violated: %s\n", __FILE__, __LINE__, (what)); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

namespace tessera::fuzz {

inline std::span<const std::byte> Bytes(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

inline absl::string_view Text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace tessera::fuzz

#endif  // TESSERA_FUZZ_FUZZ_CHECK_H_
