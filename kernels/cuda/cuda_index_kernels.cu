// The CUDA backend's indexing kernels: the index range check, the wrap of negative indices,
// gather, scatter (written, or added with atomics) and index_select, one thread per element.

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_index_launch.h"
#include "kernels/cuda/device_element.cuh"

namespace tessera::kernels::cuda {
namespace {

__global__ void FindIndexOutsideKernel(const int64_t* index, int64_t count, int64_t lo, int64_t hi,
                                       unsigned long long* first_bad) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{blockDim.x} * gridDim.x) {
    if (index[i] < lo || index[i] >= hi) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

__global__ void WrapIndicesKernel(int64_t* index, int64_t count, int64_t size) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{blockDim.x} * gridDim.x) {
    if (index[i] < 0) index[i] += size;
  }
}

// The offsets of position p of the walk in the indexed tensor and in the other operand.
__device__ inline void WalkOffsets(const IndexWalkIndexer& w, const int64_t* index, int64_t p,
                                   int64_t* indexed, int64_t* other) {
  int64_t rest = p, at_indexed = 0, at_other = 0;
  for (int d = w.rank - 1; d >= 0; --d) {
    const int64_t c = rest % w.shape[d];
    rest /= w.shape[d];
    if (d != w.dim) at_indexed += c * w.indexed_strides[d];
    at_other += c * w.other_strides[d];
  }
  *indexed = at_indexed + index[p] * w.indexed_strides[w.dim];
  *other = at_other;
}

template <typename Word>
__global__ void GatherKernel(const Word* x, const int64_t* index, Word* out, int64_t n,
                             IndexWalkIndexer w) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < n;
       p += int64_t{blockDim.x} * gridDim.x) {
    int64_t from = 0, to = 0;
    WalkOffsets(w, index, p, &from, &to);
    out[to] = x[from];
  }
}

// *address += value for a one-byte type, as a compare-and-swap of the aligned word holding it
// (bool: logical or).
template <typename T>
__device__ void AtomicAddByte(T* address, T value) {
  const auto at = reinterpret_cast<uintptr_t>(address);
  auto* word = reinterpret_cast<unsigned int*>(at & ~uintptr_t{3});
  const unsigned shift = static_cast<unsigned>(at & 3) * 8;
  if constexpr (std::is_same_v<T, bool>) {
    if (value) atomicOr(word, 1u << shift);
  } else {
    unsigned old = *word, assumed = 0;
    do {
      assumed = old;
      const auto current = static_cast<uint8_t>((assumed >> shift) & 0xffu);
      const auto sum = static_cast<uint8_t>(current + static_cast<uint8_t>(value));
      old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (unsigned{sum} << shift));
    } while (assumed != old);
  }
}

// *address += value atomically: integers wrap, float16 and bfloat16 round each sum.
template <typename T>
__device__ void AtomicAdd(T* address, T value) {
  if constexpr (sizeof(T) == 1) {
    AtomicAddByte(address, value);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(address),
              static_cast<unsigned long long>(value));
  } else {
    atomicAdd(address, value);  // float, double, __half, __nv_bfloat16, int32_t
  }
}

template <typename T, bool kSum>
__global__ void ScatterKernel(T* dst, const int64_t* index, const T* src, int64_t n,
                              IndexWalkIndexer w) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < n;
       p += int64_t{blockDim.x} * gridDim.x) {
    int64_t to = 0, from = 0;
    WalkOffsets(w, index, p, &to, &from);
    if constexpr (kSum) {
      AtomicAdd(dst + to, src[from]);
    } else {
      dst[to] = src[from];
    }
  }
}

template <typename Word>
__global__ void IndexSelectKernel(const Word* x, const int64_t* index, Word* out, int64_t outer,
                                  int64_t size, int64_t inner, int64_t count) {
  const int64_t n = outer * count * inner;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{blockDim.x} * gridDim.x) {
    const int64_t i = e % inner, c = (e / inner) % count, o = e / (inner * count);
    out[e] = x[(o * size + index[c]) * inner + i];
  }
}

// Calls f(Word{}) with an unsigned type of `size` bytes.
template <typename F>
void VisitWord(int size, F&& f) {
  switch (size) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    default:
      return f(uint64_t{});
  }
}

}  // namespace

cudaError_t LaunchFindIndexOutside(const int64_t* index, int64_t count, int64_t lo, int64_t hi,
                                   unsigned long long* first_bad, cudaStream_t stream) {
  FindIndexOutsideKernel<<<BlocksFor(count), kThreads, 0, stream>>>(index, count, lo, hi,
                                                                    first_bad);
  return cudaGetLastError();
}

cudaError_t LaunchWrapIndices(int64_t* index, int64_t count, int64_t size, cudaStream_t stream) {
  WrapIndicesKernel<<<BlocksFor(count), kThreads, 0, stream>>>(index, count, size);
  return cudaGetLastError();
}

cudaError_t LaunchGather(const void* x, const int64_t* index, void* out, int64_t n,
                         const IndexWalkIndexer& walk, int element_size, cudaStream_t stream) {
  VisitWord(element_size, [&](auto word) {
    using W = decltype(word);
    GatherKernel<W><<<BlocksFor(n), kThreads, 0, stream>>>(static_cast<const W*>(x), index,
                                                           static_cast<W*>(out), n, walk);
  });
  return cudaGetLastError();
}

cudaError_t LaunchScatter(ScatterReduce reduce, DType dtype, void* dst, const int64_t* index,
                          const void* src, int64_t n, const IndexWalkIndexer& walk,
                          cudaStream_t stream) {
  if (reduce == ScatterReduce::kNone) {
    // Elements move as they are: scatter them as words of their size.
    VisitWord(static_cast<int>(DTypeSize(dtype)), [&](auto word) {
      using W = decltype(word);
      ScatterKernel<W, false><<<BlocksFor(n), kThreads, 0, stream>>>(
          static_cast<W*>(dst), index, static_cast<const W*>(src), n, walk);
    });
  } else {
    VisitDType(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      ScatterKernel<T, true><<<BlocksFor(n), kThreads, 0, stream>>>(
          static_cast<T*>(dst), index, static_cast<const T*>(src), n, walk);
    });
  }
  return cudaGetLastError();
}

cudaError_t LaunchIndexSelect(const void* x, const int64_t* index, void* out, int64_t outer,
                              int64_t size, int64_t inner, int64_t count, int element_size,
                              cudaStream_t stream) {
  VisitWord(element_size, [&](auto word) {
    using W = decltype(word);
    IndexSelectKernel<W><<<BlocksFor(outer * count * inner), kThreads, 0, stream>>>(
        static_cast<const W*>(x), index, static_cast<W*>(out), outer, size, inner, count);
  });
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
