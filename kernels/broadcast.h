#ifndef TESSERA_KERNELS_BROADCAST_H_
#define TESSERA_KERNELS_BROADCAST_H_

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/shape.h"

namespace tessera::kernels {

// numpy's broadcasting rule: shapes align at their last dims; each pair of sizes must be equal or
// one of them 1. INVALID_ARGUMENT naming both shapes otherwise.
absl::StatusOr<Shape> BroadcastShapes(std::span<const int64_t> a, std::span<const int64_t> b);

// How to walk two contiguous inputs broadcast to a contiguous output, with size-1 dims dropped and
// adjacent dims merged where both inputs allow: strides are in elements, 0 where an input repeats.
struct BroadcastLayout {
  Shape shape;
  std::vector<int64_t> a_strides;
  std::vector<int64_t> b_strides;
};

// The layout for inputs of shapes `a` and `b` that broadcast to `out` (checked by the caller).
BroadcastLayout MakeBroadcastLayout(std::span<const int64_t> a, std::span<const int64_t> b,
                                    std::span<const int64_t> out);

// BroadcastLayout for three inputs (where's condition and values): strides[k] are input k's.
struct BroadcastLayout3 {
  Shape shape;
  std::array<std::vector<int64_t>, 3> strides;
};

// The layout for inputs of shapes `a`, `b` and `c` that broadcast to `out` (checked by the caller).
BroadcastLayout3 MakeBroadcastLayout3(std::span<const int64_t> a, std::span<const int64_t> b,
                                      std::span<const int64_t> c, std::span<const int64_t> out);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_BROADCAST_H_
