// The view ops on local shards: the strategy leaves each rank's block of the input viewing as its
// block of the output, so a reshape is a copy under the output's local shape, and permutes and
// expands are strided copies.
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/aten/aten_context.h"
#include "kernels/layout.h"

namespace tessera::kernels::aten {
namespace {

absl::StatusOr<DeviceTensor> ReshapeKernel(Context& ctx) {
  const ConstTensorView x = ctx.Input("self");
  if (x.num_elements() != NumElements(ctx.out_shape)) {
    return absl::InternalError(absl::StrCat(ctx.name(), ": a local block ", ShapeToString(x.shape),
                                            " cannot view as ", ShapeToString(ctx.out_shape)));
  }
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.Copy(Reshaped(x, ctx.out_shape), out.View()));
  return out;
}

// out[i...] = x[perm applied to i...]: output dim d is input dim perm[d].
absl::StatusOr<DeviceTensor> Permuted(Context& ctx, const std::vector<int>& perm) {
  const ConstTensorView x = ctx.Input("self");
  const ConstStridedView src = StridedOf(x);
  ConstStridedView permuted{src.data, src.dtype, {}, {}};
  for (int d : perm) {
    permuted.shape.push_back(src.shape[d]);
    permuted.strides.push_back(src.strides[d]);
  }
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.CopyStrided(permuted, StridedOf(out.View())));
  return out;
}

absl::StatusOr<DeviceTensor> PermuteKernel(Context& ctx) {
  const int rank = ctx.Input("self").rank();
  std::vector<int> perm;
  for (int64_t d : ctx.args().Ints("dims")) perm.push_back(static_cast<int>(d < 0 ? d + rank : d));
  return Permuted(ctx, perm);
}

absl::StatusOr<DeviceTensor> TransposeKernel(Context& ctx) {
  const int rank = ctx.Input("self").rank();
  std::vector<int> perm(rank);
  std::iota(perm.begin(), perm.end(), 0);
  if (rank == 0) return Permuted(ctx, perm);
  int d0 = 0, d1 = rank - 1;
  if (ctx.call().op->schema.name == "transpose") {
    ASSIGN_OR_RETURN(d0, ctx.Dim("dim0", rank));
    ASSIGN_OR_RETURN(d1, ctx.Dim("dim1", rank));
  }
  std::swap(perm[d0], perm[d1]);
  return Permuted(ctx, perm);
}

absl::StatusOr<DeviceTensor> ExpandKernel(Context& ctx) {
  const ConstTensorView x = ctx.Input("self");
  const ConstStridedView src = StridedOf(x);
  const int out_rank = static_cast<int>(ctx.out_shape.size());
  const int lead = out_rank - x.rank();
  ConstStridedView expanded{src.data, src.dtype, ctx.out_shape, std::vector<int64_t>(out_rank, 0)};
  for (int d = 0; d < x.rank(); ++d) {
    if (x.shape[d] == ctx.out_shape[lead + d]) expanded.strides[lead + d] = src.strides[d];
  }
  ASSIGN_OR_RETURN(DeviceTensor out, ctx.Output());
  RETURN_IF_ERROR(ctx.backend.CopyStrided(expanded, StridedOf(out.View())));
  return out;
}

}  // namespace

void AddViewKernels(LocalTable& t) {
  for (const char* name :
       {"aten::view", "aten::_unsafe_view", "aten::reshape", "aten::flatten.using_ints",
        "aten::unflatten.int", "aten::unsqueeze", "aten::squeeze.dim", "aten::squeeze"}) {
    t[name] = ReshapeKernel;
  }
  t["aten::permute"] = PermuteKernel;
  t["aten::transpose.int"] = t["aten::t"] = TransposeKernel;
  t["aten::expand"] = ExpandKernel;
}

}  // namespace tessera::kernels::aten
