#include "core/ops/op_meta.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"

namespace tessera::ops {

OpDef& DefineOp(OpRegistry& registry, absl::string_view schema, OpFamily family) {
  absl::StatusOr<OpSchema> parsed = ParseSchema(schema);
  if (!parsed.ok()) {
    std::cerr << "op registry: schema '" << schema << "': " << parsed.status() << "\n";
    std::abort();
  }
  auto op = std::make_unique<OpDef>();
  op->schema = *std::move(parsed);
  op->family = family;
  op->qualified_name = op->schema.QualifiedName();
  OpDef& ref = *op;
  registry.Add(std::move(op));
  return ref;
}

std::vector<std::string> SplitNames(absl::string_view names) {
  return absl::StrSplit(names, ',', absl::SkipEmpty());
}

absl::StatusOr<Shape> BroadcastShapes(absl::string_view op, std::span<const Shape> shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      if (s[i] == o || s[i] == 1) continue;
      if (o != 1) {
        std::vector<std::string> texts;
        for (const Shape& t : shapes) texts.push_back(ShapeToString(t));
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": shapes ", absl::StrJoin(texts, ", "), " do not broadcast (dim ",
            static_cast<int64_t>(i) - static_cast<int64_t>(s.size()), ": ", o, " vs ", s[i], ")"));
      }
      o = s[i];
    }
  }
  return out;
}

absl::Status ArgError(const CallContext& call, absl::string_view arg, absl::string_view detail) {
  return absl::InvalidArgumentError(
      absl::StrCat(call.op.name(), ": argument '", arg, "' ", detail));
}

std::vector<Operand> Operands(const CallContext& call, std::span<const std::string> names) {
  std::vector<Operand> out;
  for (const std::string& name : names) {
    const OpValue& v = call.args.Get(name);
    if (const auto* t = std::get_if<TensorRef>(&v)) {
      const TensorMeta& m = call.inputs[t->index];
      out.push_back({t->index,
                     m.shape,
                     {m.dtype, m.shape.empty() ? OperandKind::kZeroDim : OperandKind::kDimTensor}});
    } else if (std::holds_alternative<bool>(v)) {
      out.push_back({-1, {}, {DType::kBool, OperandKind::kWrappedNumber}});
    } else if (std::holds_alternative<int64_t>(v)) {
      out.push_back({-1, {}, {DType::kInt64, OperandKind::kWrappedNumber}});
    } else if (std::holds_alternative<double>(v)) {
      out.push_back({-1, {}, {DType::kFloat64, OperandKind::kWrappedNumber}});
    }
  }
  return out;
}

absl::StatusOr<TensorMeta> InputTensor(const CallContext& call, absl::string_view arg) {
  const int index = call.args.Tensor(arg);
  if (index < 0) {
    return ArgError(call, arg,
                    absl::StrCat("must be a tensor, not ", OpValueToString(call.args.Get(arg))));
  }
  return call.inputs[index];
}

absl::StatusOr<int> CallDim(const CallContext& call, absl::string_view arg, int64_t dim, int rank) {
  const int n = std::max(rank, 1);
  if (dim < -n || dim >= n) {
    return ArgError(call, arg,
                    absl::StrCat("is ", dim, ", out of range for a tensor of ", rank,
                                 " dims (expected [", -n, ", ", n - 1, "])"));
  }
  return static_cast<int>(dim < 0 ? dim + n : dim) % n;
}

absl::StatusOr<std::vector<int>> ReductionDims(const CallContext& call, absl::string_view arg,
                                               int rank) {
  std::vector<int> dims;
  if (call.args.IsNone(arg) || call.args.Ints(arg).empty()) {
    for (int d = 0; d < rank; ++d) dims.push_back(d);
    return dims;
  }
  for (int64_t d : call.args.Ints(arg)) {
    ASSIGN_OR_RETURN(const int n, CallDim(call, arg, d, rank));
    if (rank == 0) continue;
    if (std::find(dims.begin(), dims.end(), n) != dims.end()) {
      return ArgError(call, arg, absl::StrCat("names dim ", n, " twice"));
    }
    dims.push_back(n);
  }
  std::sort(dims.begin(), dims.end());
  return dims;
}

bool IsFloating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 ||
         dtype == DType::kBFloat16;
}

bool IsIntegral(DType dtype) { return !IsFloating(dtype) && dtype != DType::kBool; }

std::vector<DimChoice> ShardAlignedChoices(std::span<const Operand> operands,
                                           const Shape& out_shape, int num_inputs) {
  const int out_rank = static_cast<int>(out_shape.size());
  std::vector<DimChoice> out;
  for (int o = 0; o < out_rank; ++o) {
    DimChoice c{std::vector<Placement>(num_inputs, Placement::Replicate()), Placement::Shard(o)};
    bool any_sharded = false;
    for (const Operand& op : operands) {
      if (op.input < 0) continue;
      const int d = o - (out_rank - static_cast<int>(op.shape.size()));
      // A size-1 dim broadcasts unless the output's is 1 too (then it may be sharded as is).
      if (d >= 0 && (op.shape[d] != 1 || out_shape[o] == 1)) {
        c.inputs[op.input] = Placement::Shard(d);
        any_sharded = true;
      }
    }
    if (any_sharded) out.push_back(std::move(c));
  }
  out.push_back(
      {std::vector<Placement>(num_inputs, Placement::Replicate()), Placement::Replicate()});
  return out;
}

}  // namespace tessera::ops
