// Registry ops from C++: Call's arguments encoded as the Python client encodes them
// (client/python/tessera/op_args.py), the op sent on RunOp's path, the typed wrappers over Call,
// and Session::ListOps.

#include "tessera/ops.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/dtensor_access.h"
#include "client/op_submit.h"
#include "client/session_impl.h"
#include "core/ops/op_propagation.h"
#include "core/ops/op_registry.h"
#include "core/ops/op_schema.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "tessera/session.h"

namespace tessera::client {
namespace {

// `op` as the registry spells it: "softmax.int" is "aten::softmax.int".
std::string QualifiedName(std::string_view op) {
  std::string name(op);
  return name.find("::") == std::string::npos ? "aten::" + name : name;
}

// The arguments of one call as the registry takes them, collecting its inputs: each DTensor once
// (by name), in order of first appearance.
class CallEncoder {
 public:
  explicit CallEncoder(std::string op) : op_(std::move(op)) {}

  absl::StatusOr<ops::NamedValue> Encode(const OpArg& arg, size_t position) {
    where_ = arg.name().empty() ? absl::StrCat("argument ", position)
                                : absl::StrCat("argument '", arg.name(), "'");
    ops::NamedValue out{arg.name(), ops::NoneValue{}};
    ASSIGN_OR_RETURN(out.value,
                     std::visit([this](const auto& v) { return Value(v); }, arg.value()));
    return out;
  }
  const std::vector<DTensor>& inputs() const { return inputs_; }

 private:
  absl::StatusOr<ops::OpValue> Value(std::monostate) { return ops::NoneValue{}; }
  absl::StatusOr<ops::OpValue> Value(const DTensor& t) {
    ASSIGN_OR_RETURN(const int index, IndexOf(t));
    return ops::TensorRef{index};
  }
  absl::StatusOr<ops::OpValue> Value(const OpArg::TensorList& tensors) {
    ops::TensorList list;
    for (const std::optional<DTensor>& t : tensors) {
      if (!t.has_value()) {
        list.indices.push_back(-1);
        continue;
      }
      ASSIGN_OR_RETURN(const int index, IndexOf(*t));
      list.indices.push_back(index);
    }
    return list;
  }
  template <typename T>
  absl::StatusOr<ops::OpValue> Value(const T& v) {
    return ops::OpValue(v);
  }

  // The input index of `t`, adding it the first time it appears.
  absl::StatusOr<int> IndexOf(const DTensor& t) {
    const auto& state = DTensorAccess::StateOf(t);
    if (state == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(op_, ": ", where_, " is an empty DTensor handle"));
    }
    const DTensor* first = inputs_.empty() ? nullptr : &inputs_[0];
    if (first != nullptr && state->session != DTensorAccess::StateOf(*first)->session) {
      return absl::InvalidArgumentError(absl::StrCat(op_, ": ", where_, " ('", t.name(),
                                                     "') belongs to another session than '",
                                                     inputs_[0].name(), "'"));
    }
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (inputs_[i].name() == t.name()) return static_cast<int>(i);
    }
    inputs_.push_back(t);
    return static_cast<int>(inputs_.size() - 1);
  }

  const std::string op_;
  std::string where_;
  std::vector<DTensor> inputs_;
};

// The output's spec and redistributions as the coordinator will plan them (ops::PlanOpCall).
absl::StatusOr<internal::PlannedOp> PlanForStream(const std::string& op,
                                                  std::span<const ops::NamedValue> args,
                                                  absl::Span<const DTensor> inputs) {
  ASSIGN_OR_RETURN(const ops::OpDef* def, ops::Registry().Find(op));
  std::vector<DTensorSpec> given;
  for (const DTensor& t : inputs) given.push_back(t.spec());
  internal::SessionImpl& impl = internal_impl(*DTensorAccess::StateOf(inputs[0])->session);
  if (def->decompose != nullptr) {  // each node's redistributions, as the coordinator's reply
    ASSIGN_OR_RETURN(const ops::PlannedDecomposition d,
                     ops::PlanDecomposedCall(*def, args, given, impl.op_plans));
    std::vector<std::string> names;
    for (int i : d.prepared.input_of) names.push_back(inputs[i].name());
    internal::PlannedOp out{d.planned.values.back(), {}};
    for (size_t k = 0; k < d.planned.nodes.size(); ++k) {
      const ops::PlannedCall& node = d.planned.nodes[k];
      for (size_t i = 0; i < node.specs.size(); ++i) {
        if (node.plan->input_plans[i].steps.empty()) continue;
        out.redistributions.push_back({names[node.prepared.input_of[i]], node.specs[i].placements,
                                       node.plan->strategy.inputs[i], node.plan->input_plans[i]});
      }
      names.push_back(ops::NodeLabel(*def, d.planned, static_cast<int>(k)));
    }
    return out;
  }
  ASSIGN_OR_RETURN(const ops::PlannedCall planned,
                   ops::PlanOpCall(*def, args, given, impl.op_plans));
  internal::PlannedOp out{planned.plan->output, {}, planned.plan->more_outputs};
  for (size_t i = 0; i < planned.specs.size(); ++i) {
    if (planned.plan->input_plans[i].steps.empty()) continue;
    out.redistributions.push_back({inputs[planned.prepared.input_of[i]].name(),
                                   planned.specs[i].placements, planned.plan->strategy.inputs[i],
                                   planned.plan->input_plans[i]});
  }
  return out;
}

// A call encoded: its arguments as the registry takes them and its inputs.
struct EncodedCall {
  std::string name;
  std::vector<ops::NamedValue> values;
  std::vector<DTensor> inputs;
  v1::OpRequest request;
};

absl::StatusOr<EncodedCall> Encode(std::string_view op, absl::Span<const OpArg> args) {
  EncodedCall out;
  out.name = QualifiedName(op);
  CallEncoder encoder(out.name);
  for (size_t i = 0; i < args.size(); ++i) {
    ASSIGN_OR_RETURN(ops::NamedValue value, encoder.Encode(args[i], i));
    out.values.push_back(std::move(value));
  }
  out.inputs = encoder.inputs();
  if (out.inputs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(out.name, " takes a DTensor argument (numbers alone have no mesh)"));
  }
  out.request.mutable_op()->set_name(out.name);
  ArgsToProto(out.values, *out.request.mutable_op());
  for (const DTensor& t : out.inputs) out.request.add_inputs(t.name());
  return out;
}

absl::StatusOr<ValuesAndIndices> Pair(absl::StatusOr<std::vector<DTensor>> outs) {
  if (!outs.ok()) return outs.status();
  return ValuesAndIndices{(*outs)[0], (*outs)[1]};
}

}  // namespace

absl::StatusOr<DTensor> Call(std::string_view op, absl::Span<const OpArg> args,
                             const std::string& output) {
  ASSIGN_OR_RETURN(EncodedCall c, Encode(op, args));
  c.request.set_output(output);
  return internal::SubmitOp(std::move(c.request), c.inputs, c.name,
                            [&]() { return PlanForStream(c.name, c.values, c.inputs); });
}

absl::StatusOr<std::vector<DTensor>> CallOutputs(std::string_view op,
                                                 absl::Span<const OpArg> args) {
  ASSIGN_OR_RETURN(EncodedCall c, Encode(op, args));
  return internal::SubmitOpOutputs(std::move(c.request), c.inputs, c.name,
                                   [&]() { return PlanForStream(c.name, c.values, c.inputs); });
}

absl::StatusOr<ValuesAndIndices> MaxAlong(const DTensor& x, int64_t dim, bool keepdim) {
  return Pair(CallOutputs("aten::max.dim", {x, dim, keepdim}));
}
absl::StatusOr<ValuesAndIndices> MinAlong(const DTensor& x, int64_t dim, bool keepdim) {
  return Pair(CallOutputs("aten::min.dim", {x, dim, keepdim}));
}
absl::StatusOr<ValuesAndIndices> Sort(const DTensor& x, int64_t dim, bool descending) {
  return Pair(CallOutputs("aten::sort", {x, dim, descending}));
}
absl::StatusOr<ValuesAndIndices> TopK(const DTensor& x, int64_t k, int64_t dim, bool largest,
                                      bool sorted) {
  return Pair(CallOutputs("aten::topk", {x, k, dim, largest, sorted}));
}
absl::StatusOr<std::vector<DTensor>> Split(const DTensor& x, int64_t split_size, int64_t dim) {
  return CallOutputs("aten::split.Tensor", {x, split_size, dim});
}
absl::StatusOr<std::vector<DTensor>> SplitWithSizes(const DTensor& x,
                                                    std::vector<int64_t> split_sizes, int64_t dim) {
  return CallOutputs("aten::split_with_sizes", {x, std::move(split_sizes), dim});
}
absl::StatusOr<std::vector<DTensor>> Chunk(const DTensor& x, int64_t chunks, int64_t dim) {
  return CallOutputs("aten::chunk", {x, chunks, dim});
}
absl::StatusOr<std::vector<DTensor>> Unbind(const DTensor& x, int64_t dim) {
  return CallOutputs("aten::unbind.int", {x, dim});
}

absl::StatusOr<DTensor> View(const DTensor& x, std::vector<int64_t> shape) {
  return Call("aten::view", {x, std::move(shape)});
}
absl::StatusOr<DTensor> Reshape(const DTensor& x, std::vector<int64_t> shape) {
  return Call("aten::reshape", {x, std::move(shape)});
}
absl::StatusOr<DTensor> Permute(const DTensor& x, std::vector<int64_t> dims) {
  return Call("aten::permute", {x, std::move(dims)});
}
absl::StatusOr<DTensor> Unsqueeze(const DTensor& x, int64_t dim) {
  return Call("aten::unsqueeze", {x, dim});
}
absl::StatusOr<DTensor> Softmax(const DTensor& x, int64_t dim, std::optional<DType> dtype) {
  return Call("aten::softmax.int", {x, dim, dtype});
}
absl::StatusOr<DTensor> LogSoftmax(const DTensor& x, int64_t dim, std::optional<DType> dtype) {
  return Call("aten::log_softmax.int", {x, dim, dtype});
}
absl::StatusOr<DTensor> Exp(const DTensor& x) { return Call("aten::exp", {x}); }
absl::StatusOr<DTensor> Cat(absl::Span<const DTensor> tensors, int64_t dim) {
  return Call("aten::cat", {tensors, dim});
}
absl::StatusOr<DTensor> Slice(const DTensor& x, int64_t dim, std::optional<int64_t> start,
                              std::optional<int64_t> end, int64_t step) {
  return Call("aten::slice.Tensor", {x, dim, start, end, step});
}
absl::StatusOr<DTensor> Select(const DTensor& x, int64_t dim, int64_t index) {
  return Call("aten::select.int", {x, dim, index});
}
absl::StatusOr<DTensor> Where(const DTensor& condition, const DTensor& x, const DTensor& y) {
  return Call("aten::where.self", {condition, x, y});
}
absl::StatusOr<DTensor> Linear(const DTensor& input, const DTensor& weight,
                               const std::optional<DTensor>& bias) {
  return Call("aten::linear", {input, weight, bias});
}
absl::StatusOr<DTensor> Embedding(const DTensor& weight, const DTensor& indices) {
  return Call("aten::embedding", {weight, indices});
}

absl::StatusOr<DTensor> CrossEntropy(const DTensor& logits, const DTensor& target,
                                     const CrossEntropyOptions& options) {
  return Call("aten::cross_entropy_loss",
              {logits, target, options.weight, static_cast<int64_t>(options.reduction),
               options.ignore_index, options.label_smoothing});
}
absl::StatusOr<DTensor> NllLoss(const DTensor& log_probs, const DTensor& target,
                                const CrossEntropyOptions& options) {
  return Call("aten::nll_loss", {log_probs, target, options.weight,
                                 static_cast<int64_t>(options.reduction), options.ignore_index});
}
absl::StatusOr<DTensor> MseLoss(const DTensor& x, const DTensor& target, LossReduction reduction) {
  return Call("aten::mse_loss", {x, target, static_cast<int64_t>(reduction)});
}

absl::StatusOr<std::vector<OpInfo>> Session::ListOps(const std::string& filter) {
  v1::ListOpsRequest request;
  request.set_filter(filter);
  grpc::ClientContext context;
  impl_->Prepare(&context);
  v1::ListOpsReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl_->dtensors->ListOps(&context, request, &reply)));
  std::vector<OpInfo> out;
  for (const v1::OpInfo& op : reply.ops()) {
    out.push_back({op.name(), op.schema(), op.family(), op.strategies(), op.implementation(),
                   op.derivative()});
  }
  return out;
}

}  // namespace tessera::client
