#ifndef TESSERA_CORE_SHAPE_H_
#define TESSERA_CORE_SHAPE_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"

namespace tessera {

// Sizes of a tensor's dimensions, outermost first.
using Shape = std::vector<int64_t>;

// Product of the sizes; 1 for a scalar (empty shape).
int64_t NumElements(std::span<const int64_t> shape);

// "[2, 5]".
std::string ShapeToString(std::span<const int64_t> shape);

// Row-major (C order) strides in elements.
std::vector<int64_t> ContiguousStrides(std::span<const int64_t> shape);

// The most dims a tensor of a request may have (torch allows 64 too).
inline constexpr int kMaxRank = 64;

// OK iff every size is >= 0 and the element count fits in int64; names the bad dim otherwise.
absl::Status ValidateShape(std::span<const int64_t> shape);

// OK iff `shape` is valid (ValidateShape) and a `dtype` tensor of it has a byte count that fits in
// int64; INVALID_ARGUMENT naming the dtype and shape otherwise.
absl::Status ValidateTensorShape(DType dtype, std::span<const int64_t> shape);

// Maps a possibly negative dim (-1 = last) into [0, rank); INVALID_ARGUMENT if out of range.
absl::StatusOr<int> NormalizeDim(int64_t dim, int rank);

// Parses "2,5" or "[2, 5]" or "" (a scalar).
absl::StatusOr<Shape> ParseShape(absl::string_view text);

}  // namespace tessera

#endif  // TESSERA_CORE_SHAPE_H_
