#ifndef TESSERA_CORE_CHECKED_MATH_H_
#define TESSERA_CORE_CHECKED_MATH_H_

#include <cstdint>
#include <optional>
#include <span>

namespace tessera {

// a * b, or nothing if it does not fit in int64.
inline std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// a + b, or nothing if it does not fit in int64.
inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// The product of `sizes` (1 for none), or nothing if it or any partial product does not fit.
inline std::optional<int64_t> CheckedProduct(std::span<const int64_t> sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    std::optional<int64_t> next = CheckedMul(n, s);
    if (!next) return std::nullopt;
    n = *next;
  }
  return n;
}

}  // namespace tessera

#endif  // TESSERA_CORE_CHECKED_MATH_H_
