// View ops on DTensors through a dim map, as torch.distributed.tensor's _view_ops: each output dim
// of a view is described in terms of the input's dims, and a Shard placement survives the view
// only where every rank's local view is exactly its block of the global view; elsewhere the input
// is made Replicate on that mesh dim first, so a view of a sharded tensor is never wrong (uneven
// and empty shards included).
#ifndef TESSERA_CORE_SHARDING_VIEW_OPS_H_
#define TESSERA_CORE_SHARDING_VIEW_OPS_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/shape.h"
#include "core/sharding/dtensor_spec.h"
#include "core/sharding/placement.h"

namespace tessera {

// One output dim of a view (torch's DimSpec).
struct ViewDim {
  enum class Kind {
    kDims,       // the input dims `sources` merged in order (one: that dim as it is)
    kSplit,      // piece `piece` of the input dims `sources` merged, cut into sizes `group`
    kSingleton,  // a dim of size 1 from no input dim
    kBroadcast,  // input dim `sources[0]`, of size 1, expanded to `size`
    kNewDim,     // a new dim of `size` from no input dim (expand's leading dims, empty tensors)
  };
  Kind kind = Kind::kSingleton;
  std::vector<int> sources;
  std::vector<int64_t> group;
  int piece = 0;
  int64_t size = 1;

  // "InputDim(0)", "Flatten(0, 1)", "Split(Flatten(0, 1), [3, 2], 0)", "Singleton()", ...
  std::string ToString() const;
  friend bool operator==(const ViewDim&, const ViewDim&) = default;
};

// The dim map of view/reshape/_unsafe_view from `from` to `to` (one entry may be -1, inferred as
// torch does); INVALID_ARGUMENT naming `op` and the sizes when `to` does not fit.
absl::StatusOr<std::vector<ViewDim>> ViewDimMap(const Shape& from, std::span<const int64_t> to,
                                                const std::string& op = "view");
// The dim maps of the other view ops (dims may be negative, counted from the end).
absl::StatusOr<std::vector<ViewDim>> UnsqueezeDimMap(const Shape& from, int dim);
absl::StatusOr<std::vector<ViewDim>> SqueezeDimMap(const Shape& from, int dim);
absl::StatusOr<std::vector<ViewDim>> PermuteDimMap(const Shape& from, std::span<const int> dims);
absl::StatusOr<std::vector<ViewDim>> TransposeDimMap(const Shape& from, int dim0, int dim1);
absl::StatusOr<std::vector<ViewDim>> ExpandDimMap(const Shape& from,
                                                  std::span<const int64_t> sizes);
absl::StatusOr<std::vector<ViewDim>> FlattenDimMap(const Shape& from, int start_dim, int end_dim);
absl::StatusOr<std::vector<ViewDim>> UnflattenDimMap(const Shape& from, int dim,
                                                     std::span<const int64_t> sizes);

// The output shape a dim map gives for an input of shape `from`.
Shape ViewOutputShape(const Shape& from, const std::vector<ViewDim>& map);

// How a view of a DTensor runs: the placements its input must have first (each Shard the view
// cannot keep made Replicate; Partial and Replicate kept), and the output's placements and shape.
// Each rank then views its local block of the input as the output's local shape (or permutes or
// expands it, for those ops).
struct ViewSharding {
  std::vector<Placement> input;
  std::vector<Placement> output;
  Shape shape;
};
absl::StatusOr<ViewSharding> PropagateView(const DTensorSpec& input,
                                           const std::vector<ViewDim>& map);

}  // namespace tessera

#endif  // TESSERA_CORE_SHARDING_VIEW_OPS_H_
