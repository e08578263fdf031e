#ifndef TESSERA_CORE_SMALL_INTEGER_TENSOR_H_
#define TESSERA_CORE_SMALL_INTEGER_TENSOR_H_

#include <cstdint>

#include "core/host_tensor.h"

namespace tessera {

// A tensor of pseudo-random small integers (in [-8, 8]; [0, 8] for uint8; 0/1 for bool) stored in
// `dtype`, the same for the same seed. Sums, products of a few and averages of identical copies
// stay exact in every dtype, so a distributed result can be compared with a reference bit for bit.
// `shape` must be valid, as for HostTensor::ZerosOfValidShape.
HostTensor SmallIntegerTensor(DType dtype, const Shape& shape, uint32_t seed);

}  // namespace tessera

#endif  // TESSERA_CORE_SMALL_INTEGER_TENSOR_H_
