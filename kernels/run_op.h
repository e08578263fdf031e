#ifndef TESSERA_KERNELS_RUN_OP_H_
#define TESSERA_KERNELS_RUN_OP_H_

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/host_tensor.h"
#include "core/shape.h"
#include "core/sharding/op_call.h"
#include "kernels/backend.h"

namespace tessera::kernels {

// Computes `op` on one rank's local inputs, already laid out as the chosen strategy requires and
// held in the backend's memory; the result is a new tensor there. `global_input_shapes` are the
// inputs' global shapes (mean divides by the global count). A Max over a dim that is empty locally
// gives the reduce identity (core's FillIdentity), as the Partial(max) contract needs. The output's
// shape and dtype are InferOpOutput's on the local inputs. INVALID_ARGUMENT for inputs that do not
// fit the op.
absl::StatusOr<DeviceTensor> RunLocalOp(KernelBackend& backend, const OpCall& op,
                                        absl::Span<const ConstTensorView> inputs,
                                        absl::Span<const Shape> global_input_shapes);
// The same on host tensors: uploaded, computed, and the result downloaded.
absl::StatusOr<HostTensor> RunLocalOp(KernelBackend& backend, const OpCall& op,
                                      absl::Span<const HostTensor* const> inputs,
                                      absl::Span<const Shape> global_input_shapes);

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_RUN_OP_H_
