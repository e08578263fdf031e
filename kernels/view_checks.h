#ifndef TESSERA_KERNELS_VIEW_CHECKS_H_
#define TESSERA_KERNELS_VIEW_CHECKS_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace tessera::kernels {

// OK iff `view` (a tensor or strided view) has a valid shape and data for it; errors name the
// operation and the operand.
template <typename View>
absl::Status CheckView(absl::string_view op, absl::string_view operand, const View& view) {
  if (absl::Status s = ValidateShape(view.shape); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(op, " ", operand, ": ", s.message()));
  }
  if (view.data == nullptr && NumElements(view.shape) > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " ", operand, " of shape ", ShapeToString(view.shape), " has no data"));
  }
  return absl::OkStatus();
}

// OK iff `view` is valid and has `dtype` and `shape`; errors name the operation and the operand.
template <typename View>
absl::Status CheckOperand(absl::string_view op, absl::string_view operand, const View& view,
                          DType dtype, const Shape& shape) {
  if (absl::Status s = CheckView(op, operand, view); !s.ok()) return s;
  if (view.dtype == dtype && view.shape == shape) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, " ", operand, " must be ", DTypeName(dtype), " ", ShapeToString(shape),
                   "; got ", DTypeName(view.dtype), " ", ShapeToString(view.shape)));
}

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_VIEW_CHECKS_H_
