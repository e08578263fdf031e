// How one rank computes its part of a registered op (core/ops/op_registry.h) on its local
// shards, already laid out as the op's chosen strategy requires (implemented in aten_context.cc,
// with the table of the families' implementations).
#ifndef TESSERA_KERNELS_ATEN_LOCAL_CALL_H_
#define TESSERA_KERNELS_ATEN_LOCAL_CALL_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/ops/op_propagation.h"
#include "core/sharding/dtensor_spec.h"
#include "kernels/backend.h"

namespace tessera::kernels {

// Where a random op's call draws from the caller's stream: element i of its output (the global
// linear index) is Philox4x32-10 keyed by `seed` at counter `offset + i` (kernels/philox.h).
struct RandomStream {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// One rank's part of a call: the bound call, every input's spec in the strategy's layout, the
// output's spec, the rank's mesh coordinate, and the random stream (random ops only).
struct LocalCall {
  const ops::BoundCall* call = nullptr;
  std::span<const DTensorSpec> inputs;
  const DTensorSpec* output = nullptr;
  std::span<const int64_t> coordinate;
  RandomStream random = {};
  // An op with several outputs: the specs of the outputs after the first.
  std::span<const DTensorSpec> more_outputs = {};
};

// Computes the rank's block of every output from its blocks of the inputs (in `call.inputs`'
// layouts, in the backend's memory) as new tensors there, of the output specs' local shapes: the
// first output, then `more_outputs`. UNIMPLEMENTED naming the op where no local implementation
// exists; INVALID_ARGUMENT for data the op rejects (an index out of range, naming it).
absl::StatusOr<std::vector<DeviceTensor>> RunLocalCallOutputs(
    KernelBackend& backend, const LocalCall& call, std::span<const ConstTensorView> inputs);
// RunLocalCallOutputs of an op with one output.
absl::StatusOr<DeviceTensor> RunLocalCall(KernelBackend& backend, const LocalCall& call,
                                          std::span<const ConstTensorView> inputs);

// The qualified names of the ops with a local implementation, sorted.
std::vector<std::string> LocalImplementations();

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_ATEN_LOCAL_CALL_H_
