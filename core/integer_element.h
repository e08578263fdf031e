#ifndef TESSERA_CORE_INTEGER_ELEMENT_H_
#define TESSERA_CORE_INTEGER_ELEMENT_H_

#include <cstdint>

#include "core/host_tensor.h"

namespace tessera {

// Stores integer `v` as element `i` of `t`: wrapped modulo 2^bits for integer dtypes, != 0 for
// bool, rounded to nearest for floating dtypes.
void SetFromInt64(HostTensor& t, int64_t i, int64_t v);

}  // namespace tessera

#endif  // TESSERA_CORE_INTEGER_ELEMENT_H_
