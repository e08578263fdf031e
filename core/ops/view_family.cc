// The view ops through a dim map (core/sharding/view_ops.h, torch's _view_ops): a Shard survives
// a view only where each rank's local view is its block of the global view; otherwise that mesh
// dim is made Replicate first.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/op_meta.h"
#include "core/ops/op_registry.h"
#include "core/sharding/view_ops.h"
#include "core/status_macros.h"

namespace tessera::ops {
namespace {

enum class Kind {
  kView,
  kFlatten,
  kUnflatten,
  kUnsqueeze,
  kSqueezeDim,
  kSqueeze,
  kPermute,
  kTranspose,
  kT,
  kExpand
};

struct ViewEntry {
  const char* schema;
  Kind kind;
  const char* implementation;
  const char* derivative;
};

const std::vector<ViewEntry>& Entries() {
  static const auto* const entries = new std::vector<ViewEntry>{
      {"view(Tensor(a) self, SymInt[] size) -> Tensor(a)", Kind::kView, "local reshape",
       "view(grad, self.shape)"},
      {"_unsafe_view(Tensor self, SymInt[] size) -> Tensor", Kind::kView, "local reshape",
       "view(grad, self.shape)"},
      {"reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)", Kind::kView, "local reshape",
       "reshape(grad, self.shape)"},
      {"flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)",
       Kind::kFlatten, "local reshape", "view(grad, self.shape)"},
      {"unflatten.int(Tensor(a) self, int dim, SymInt[] sizes) -> Tensor(a)", Kind::kUnflatten,
       "local reshape", "view(grad, self.shape)"},
      {"unsqueeze(Tensor(a) self, int dim) -> Tensor(a)", Kind::kUnsqueeze, "local reshape",
       "squeeze.dim(grad, dim)"},
      {"squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)", Kind::kSqueezeDim, "local reshape",
       "view(grad, self.shape)"},
      {"squeeze(Tensor(a) self) -> Tensor(a)", Kind::kSqueeze, "local reshape",
       "view(grad, self.shape)"},
      {"permute(Tensor(a) self, int[] dims) -> Tensor(a)", Kind::kPermute, "kernel copy (strided)",
       "permute(grad, inverse(dims))"},
      {"transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)", Kind::kTranspose,
       "kernel copy (strided)", "transpose.int(grad, dim0, dim1)"},
      {"t(Tensor(a) self) -> Tensor(a)", Kind::kT, "kernel copy (strided)", "t(grad)"},
      {"expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)", Kind::kExpand,
       "kernel copy (strided, stride 0)", "sum.dim_IntList(grad, expanded dims)"},
  };
  return *entries;
}

std::vector<int> IntsOf(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

absl::StatusOr<std::vector<ViewDim>> DimMap(const CallContext& call) {
  ASSIGN_OR_RETURN(const TensorMeta x, InputTensor(call, "self"));
  const int rank = static_cast<int>(x.shape.size());
  const BoundArgs& a = call.args;
  switch (Entries()[call.op.entry].kind) {
    case Kind::kView:
      return ViewDimMap(x.shape, a.Ints(call.op.schema.args[1].name), call.op.name());
    case Kind::kFlatten:
      return FlattenDimMap(x.shape, static_cast<int>(a.Int("start_dim")),
                           static_cast<int>(a.Int("end_dim")));
    case Kind::kUnflatten:
      return UnflattenDimMap(x.shape, static_cast<int>(a.Int("dim")), a.Ints("sizes"));
    case Kind::kUnsqueeze:
      return UnsqueezeDimMap(x.shape, static_cast<int>(a.Int("dim")));
    case Kind::kSqueezeDim:
      return SqueezeDimMap(x.shape, static_cast<int>(a.Int("dim")));
    case Kind::kSqueeze: {
      Shape to;
      for (int64_t s : x.shape) {
        if (s != 1) to.push_back(s);
      }
      return ViewDimMap(x.shape, to, call.op.name());
    }
    case Kind::kPermute:
      return PermuteDimMap(x.shape, IntsOf(a.Ints("dims")));
    case Kind::kTranspose:
      return TransposeDimMap(x.shape, static_cast<int>(a.Int("dim0")),
                             static_cast<int>(a.Int("dim1")));
    case Kind::kT:
      if (rank > 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            call.op.name(), " expects a tensor of at most 2 dims, got ", ShapeToString(x.shape)));
      }
      return rank < 2 ? PermuteDimMap(x.shape, rank == 1 ? std::vector<int>{0} : std::vector<int>{})
                      : TransposeDimMap(x.shape, 0, 1);
    case Kind::kExpand:
      return ExpandDimMap(x.shape, a.Ints("size"));
  }
  return absl::InternalError("unknown view");
}

absl::StatusOr<OutputMeta> ViewMeta(const CallContext& call) {
  ASSIGN_OR_RETURN(const TensorMeta x, InputTensor(call, "self"));
  ASSIGN_OR_RETURN(const std::vector<ViewDim> map, DimMap(call));
  return OutputMeta{ViewOutputShape(x.shape, map), x.dtype};
}

absl::StatusOr<StrategyCandidates> ViewStrategies(const CallContext& call,
                                                  std::span<const DTensorSpec> specs,
                                                  const OutputMeta& out) {
  (void)out;
  ASSIGN_OR_RETURN(const std::vector<ViewDim> map, DimMap(call));
  ASSIGN_OR_RETURN(const ViewSharding v, PropagateView(specs[0], map));
  StrategyCandidates c;
  c.whole.push_back({{v.input}, v.output});
  return c;
}

}  // namespace

void RegisterViewOps(OpRegistry& registry) {
  for (size_t i = 0; i < Entries().size(); ++i) {
    const ViewEntry& e = Entries()[i];
    OpDef& op = DefineOp(registry, e.schema, OpFamily::kView);
    op.entry = static_cast<int>(i);
    op.meta = ViewMeta;
    op.strategies = ViewStrategies;
    op.implementation = e.implementation;
    op.derivative = e.derivative;
    op.strategy_text =
        "dim map: S(d) kept where every rank's local view is its block of the global view "
        "(a merged or split sharded dim divides evenly), else Replicate first; R and P kept";
  }
}

}  // namespace tessera::ops
