#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/host_element.h"
#include "kernels/philox.h"

namespace tessera::kernels {
namespace {

// The value of the element at global linear index `index` (kernels/philox.h).
template <typename T>
T RandomElement(Distribution dist, uint64_t seed, uint64_t index) {
  const Philox4x32 r = PhiloxForElement(seed, index);
  if (dist == Distribution::kNormal) {
    return Store<T>(static_cast<ComputeType<T>>(NormalValue(r)));
  }
  if constexpr (std::is_same_v<T, float>) return UniformFloat32(r);
  if constexpr (std::is_same_v<T, double>) return UniformFloat64(r);
  if constexpr (std::is_same_v<T, Float16>) return Store<T>(UniformFloat16(r));
  if constexpr (std::is_same_v<T, BFloat16>) return Store<T>(UniformBFloat16(r));
  return T{};
}

template <typename T>
void RandomFillTyped(Distribution dist, uint64_t seed, uint64_t counter,
                     const std::vector<int64_t>& global_strides, const std::vector<int64_t>& offset,
                     const Shape& shape, T* out) {
  const int rank = static_cast<int>(shape.size());
  int64_t start = 0;  // global index of the shard's first element
  for (int d = 0; d < rank; ++d) start += offset[d] * global_strides[d];
  // The counter's wrap-around in two's complement, so that the row walk below stays in int64.
  start = static_cast<int64_t>(static_cast<uint64_t>(start) + counter);
  if (rank == 0) {
    out[0] = RandomElement<T>(dist, seed, static_cast<uint64_t>(start));
    return;
  }
  const int64_t inner = shape[rank - 1];
  int64_t rows = 1;
  for (int d = 0; d + 1 < rank; ++d) rows *= shape[d];
  std::vector<int64_t> index(rank - 1, 0);
  int64_t row_start = start;
  for (int64_t row = 0; row < rows; ++row) {
    T* dst = out + row * inner;
    for (int64_t j = 0; j < inner; ++j) {
      dst[j] = RandomElement<T>(dist, seed, static_cast<uint64_t>(row_start + j));
    }
    for (int d = rank - 2; d >= 0; --d) {
      row_start += global_strides[d];
      if (++index[d] < shape[d]) break;
      row_start -= global_strides[d] * shape[d];
      index[d] = 0;
    }
  }
}

}  // namespace

absl::Status CpuBackend::DoRandomFill(const RandomFillArgs& args) {
  VisitDType(args.out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloating<T>) {
      RandomFillTyped<T>(args.dist, args.seed, args.counter, args.global_strides, args.offset,
                         args.out.shape, reinterpret_cast<T*>(args.out.data));
    }
  });
  return absl::OkStatus();
}

}  // namespace tessera::kernels
