#ifndef TESSERA_CORE_OPS_OP_VALUE_H_
#define TESSERA_CORE_OPS_OP_VALUE_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"

namespace tessera::ops {

// A tensor argument of a call: the index of one of the call's input tensors.
struct TensorRef {
  int index = 0;
  bool operator==(const TensorRef&) const = default;
};

// None, as torch passes it for an optional argument.
struct NoneValue {
  bool operator==(const NoneValue&) const = default;
};

// One argument value of an op call, as torch's IValue holds it: None, a bool, an int, a float, an
// int list, a dtype, a string, one tensor or a list of tensors (Tensor?[] lists hold None as the
// index -1). A Python scalar given for a Tensor argument stays a bool, int or float here: a
// wrapped number, which type promotion ranks below every tensor.
struct TensorList {
  std::vector<int> indices;  // -1: None (only in a Tensor?[] list)
  bool operator==(const TensorList&) const = default;
};
using OpValue = std::variant<NoneValue, bool, int64_t, double, std::vector<int64_t>, DType,
                             std::string, TensorRef, TensorList>;

// The value as torch's schema printer writes it: "None", "True", "3", "1.5", "2." (an integral
// float), "[0, 1]", "torch.float32", "'tanh'", "%1", "[%0, %2]", "[None, %1]"; a float that is not
// integral in the shortest text that reads back ("1e-05", where torch prints 17 digits).
std::string OpValueToString(const OpValue& value);

// Whether the value is a Python number (bool, int or float).
bool IsScalar(const OpValue& value);
// The value of a scalar as a double (bool as 0 or 1); 0 for any other value (checked in debug
// builds).
double ScalarAsDouble(const OpValue& value);

}  // namespace tessera::ops

#endif  // TESSERA_CORE_OPS_OP_VALUE_H_
