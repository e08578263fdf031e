// Cast and fill kernels of the CUDA backend; conversions follow kernels/convert_value.h, the rule
// the CPU backend uses.

#include "kernels/convert_value.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/device_element.cuh"

namespace tessera::kernels::cuda {
namespace {

template <typename From, typename To>
__global__ void CastKernel(const From* src, To* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    dst[i] = Store<To>(ConvertValue<ComputeType<To>>(Load(src[i])));
  }
}

template <typename Word>
__global__ void FillKernel(Word* data, int64_t n, Word value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    data[i] = value;
  }
}

}  // namespace

cudaError_t LaunchCast(DType from, const void* src, DType to, void* dst, int64_t n,
                       cudaStream_t stream) {
  VisitDType(from, [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    VisitDType(to, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      CastKernel<From, To><<<BlocksFor(n), kThreads, 0, stream>>>(static_cast<const From*>(src),
                                                                  static_cast<To*>(dst), n);
    });
  });
  return cudaGetLastError();
}

cudaError_t LaunchFill(void* data, int64_t n, uint64_t pattern, int element_size,
                       cudaStream_t stream) {
  switch (element_size) {
    case 1:
      FillKernel<<<BlocksFor(n), kThreads, 0, stream>>>(static_cast<uint8_t*>(data), n,
                                                        static_cast<uint8_t>(pattern));
      break;
    case 2:
      FillKernel<<<BlocksFor(n), kThreads, 0, stream>>>(static_cast<uint16_t*>(data), n,
                                                        static_cast<uint16_t>(pattern));
      break;
    case 4:
      FillKernel<<<BlocksFor(n), kThreads, 0, stream>>>(static_cast<uint32_t*>(data), n,
                                                        static_cast<uint32_t>(pattern));
      break;
    default:
      FillKernel<<<BlocksFor(n), kThreads, 0, stream>>>(static_cast<uint64_t*>(data), n, pattern);
      break;
  }
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
