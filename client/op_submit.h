#ifndef TESSERA_CLIENT_OP_SUBMIT_H_
#define TESSERA_CLIENT_OP_SUBMIT_H_

// The one path every DTensor op takes to the coordinator, old OpKind ops and registry ops alike:
// a unary RunOp, or the session's op stream. Internal to the client library.

#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/sharding/dtensor_spec.h"
#include "tessera/dtensor.h"
#include "tessera/v1/tensor.pb.h"

namespace tessera::client::internal {

// What the op stream hands out for an op before the coordinator answers: the output's spec and
// the inputs' redistributions, as the planner the coordinator runs chooses them.
struct PlannedOp {
  DTensorSpec output;
  std::vector<InputRedistribution> redistributions;
  std::vector<DTensorSpec> more_outputs = {};  // an op with several: those after the first
};
using PlanOp = absl::FunctionRef<absl::StatusOr<PlannedOp>()>;

// Runs `request` on `inputs` (its inputs' handles in its order: at least one, the first not
// empty). Without the op stream: one RunOp, returning the coordinator's output and the
// redistributions it inserted. With it: checks that every input is a handle of the first one's
// session and mesh whose own op is not known to have failed, then returns the output's handle at
// once, with `plan`'s metadata, and queues the op; what only the coordinator can refuse shows on
// the output. The client's own errors start with "`what`: " where `what` is not empty.
absl::StatusOr<DTensor> SubmitOp(v1::OpRequest request, absl::Span<const DTensor> inputs,
                                 absl::string_view what, PlanOp plan);

// SubmitOp of an op with several outputs: every output's handle, in order (the request's
// `outputs` are named here on the op stream, where they share the one call's outcome).
absl::StatusOr<std::vector<DTensor>> SubmitOpOutputs(v1::OpRequest request,
                                                     absl::Span<const DTensor> inputs,
                                                     absl::string_view what, PlanOp plan);

}  // namespace tessera::client::internal

#endif  // TESSERA_CLIENT_OP_SUBMIT_H_
