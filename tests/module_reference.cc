// The reference's forward and backward: a walk over the spec's tree calling reference_layers.h.
#include "tests/module_reference.h"

#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "tests/reference_layers.h"
#include "tests/reference_tree.h"

namespace tessera {
namespace {

using reference::Array;
using reference::ChildFqn;
using reference::DescribeModule;
using reference::IdArray;

// What flows between modules: floats, or the int64 ids an Embedding takes.
using Value = std::variant<Array, IdArray>;

const Shape& ShapeOf(const Value& v) {
  return std::holds_alternative<Array>(v) ? std::get<Array>(v).shape : std::get<IdArray>(v).shape;
}

reference::Pointwise PointwiseOf(const ModuleSpec& m) {
  switch (m.type) {
    case ModuleType::kReLU:
      return reference::Pointwise::kRelu;
    case ModuleType::kSiLU:
      return reference::Pointwise::kSilu;
    default:
      return m.approximate == "tanh" ? reference::Pointwise::kGeluTanh
                                     : reference::Pointwise::kGeluErf;
  }
}

// Forward and backward over a checked tree whose parameters are checked against it.
class Evaluator {
 public:
  Evaluator(const std::map<std::string, Array>& params, std::map<std::string, Array>* grads)
      : params_(params), grads_(grads) {}

  // The output of module `m` (named `fqn`) for input `x`.
  absl::StatusOr<Value> Forward(const ModuleSpec& m, const std::string& fqn, const Value& x) {
    if (std::holds_alternative<IdArray>(x)) {
      if (m.type == ModuleType::kEmbedding) {
        return reference::EmbeddingForward(std::get<IdArray>(x), Param(fqn, "weight"));
      }
      if (m.type == ModuleType::kDropout) return x;
      if (reference::IsContainer(m.type) && !m.residual) {
        return ForwardChildren(m, fqn, x);
      }
      return absl::InvalidArgumentError(
          absl::StrCat(DescribeModule(fqn, m), " takes floats, got int64 ids"));
    }
    const Array& a = std::get<Array>(x);
    RETURN_IF_ERROR(CheckInput(m, fqn, a));
    switch (m.type) {
      case ModuleType::kLinear:
        return reference::LinearForward(a, Param(fqn, "weight"), OptionalParam(fqn, "bias"));
      case ModuleType::kEmbedding:
        return absl::InvalidArgumentError(
            absl::StrCat(DescribeModule(fqn, m), " takes int64 ids, got floats"));
      case ModuleType::kLayerNorm:
        return reference::LayerNormForward(a, OptionalParam(fqn, "weight"),
                                           OptionalParam(fqn, "bias"), m.eps);
      case ModuleType::kRMSNorm:
        return reference::RmsNormForward(a, OptionalParam(fqn, "weight"), m.eps);
      case ModuleType::kReLU:
      case ModuleType::kGELU:
      case ModuleType::kSiLU:
        return reference::PointwiseForward(PointwiseOf(m), a);
      case ModuleType::kDropout:
        return x;
      case ModuleType::kAttention:
        return AttentionForward(m, fqn, a);
      case ModuleType::kSequential:
      case ModuleType::kModuleList:
      case ModuleType::kModule:
        break;
    }
    ASSIGN_OR_RETURN(Value y, ForwardChildren(m, fqn, x));
    if (!m.residual) return y;
    if (!std::holds_alternative<Array>(y) || ShapeOf(y) != a.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(DescribeModule(fqn, m), " is residual but maps shape ",
                       ShapeToString(a.shape), " to ", ShapeToString(ShapeOf(y))));
    }
    reference::AddInto(std::get<Array>(y), a);
    return y;
  }

  // The gradient of module `m`'s input `x` for its output's gradient `dy`, accumulating its
  // parameters' gradients; nullopt for an ids input.
  absl::StatusOr<std::optional<Array>> Backward(const ModuleSpec& m, const std::string& fqn,
                                                const Value& x, const Array& dy) {
    if (reference::IsContainer(m.type)) {
      return BackwardChildren(m, fqn, x, dy);
    }
    if (std::holds_alternative<IdArray>(x)) {
      if (m.type == ModuleType::kEmbedding) {
        reference::EmbeddingBackward(std::get<IdArray>(x), dy, Grad(fqn, "weight"));
      }
      return std::nullopt;
    }
    const Array& a = std::get<Array>(x);
    switch (m.type) {
      case ModuleType::kLinear:
        return reference::LinearBackward(a, Param(fqn, "weight"), dy, Grad(fqn, "weight"),
                                         OptionalGrad(fqn, "bias"));
      case ModuleType::kLayerNorm:
        return reference::LayerNormBackward(a, OptionalParam(fqn, "weight"), m.eps, dy,
                                            OptionalGrad(fqn, "weight"), OptionalGrad(fqn, "bias"));
      case ModuleType::kRMSNorm:
        return reference::RmsNormBackward(a, OptionalParam(fqn, "weight"), m.eps, dy,
                                          OptionalGrad(fqn, "weight"));
      case ModuleType::kReLU:
      case ModuleType::kGELU:
      case ModuleType::kSiLU:
        return reference::PointwiseBackward(PointwiseOf(m), a, dy);
      case ModuleType::kAttention:
        return AttentionBackward(m, fqn, a, dy);
      default:  // Dropout
        return dy;
    }
  }

 private:
  // The floats' shape fits `m`: the last dim of Linear and the norms, [B, S, dim] for Attention.
  static absl::Status CheckInput(const ModuleSpec& m, const std::string& fqn, const Array& x) {
    int64_t features = 0;
    if (m.type == ModuleType::kLinear) features = m.in_features;
    if (m.type == ModuleType::kLayerNorm || m.type == ModuleType::kRMSNorm) {
      features = m.normalized_shape;
    }
    if (m.type == ModuleType::kAttention) {
      if (x.shape.size() != 3 || x.shape[2] != m.dim) {
        return absl::InvalidArgumentError(absl::StrCat(DescribeModule(fqn, m), " takes [B, S, ",
                                                       m.dim, "], got ", ShapeToString(x.shape)));
      }
    }
    if (features != 0 && (x.shape.empty() || x.shape.back() != features)) {
      return absl::InvalidArgumentError(absl::StrCat(DescribeModule(fqn, m), " takes last dim ",
                                                     features, ", got input of shape ",
                                                     ShapeToString(x.shape)));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Value> ForwardChildren(const ModuleSpec& m, const std::string& fqn, Value x) {
    for (const ModuleSpec& child : m.children) {
      ASSIGN_OR_RETURN(x, Forward(child, ChildFqn(fqn, child.name), x));
    }
    return x;
  }

  absl::StatusOr<std::optional<Array>> BackwardChildren(const ModuleSpec& m, const std::string& fqn,
                                                        const Value& x, const Array& dy) {
    // Each child's input, recomputed: inputs[i] feeds child i.
    std::vector<Value> inputs = {x};
    for (size_t i = 0; i + 1 < m.children.size(); ++i) {
      const ModuleSpec& child = m.children[i];
      ASSIGN_OR_RETURN(Value next, Forward(child, ChildFqn(fqn, child.name), inputs.back()));
      inputs.push_back(std::move(next));
    }
    std::optional<Array> grad = dy;
    for (size_t i = m.children.size(); i-- > 0 && grad.has_value();) {
      const ModuleSpec& child = m.children[i];
      ASSIGN_OR_RETURN(grad, Backward(child, ChildFqn(fqn, child.name), inputs[i], *grad));
    }
    if (m.residual && grad.has_value()) reference::AddInto(*grad, dy);
    return grad;
  }

  Array AttentionForward(const ModuleSpec& m, const std::string& fqn, const Array& x) {
    const Array q = ProjectFrom(fqn, "q", x), k = ProjectFrom(fqn, "k", x),
                v = ProjectFrom(fqn, "v", x);
    return ProjectFrom(fqn, "o", reference::AttentionForward(q, k, v, m.n_heads, m.causal));
  }

  Array AttentionBackward(const ModuleSpec& m, const std::string& fqn, const Array& x,
                          const Array& dy) {
    const Array q = ProjectFrom(fqn, "q", x), k = ProjectFrom(fqn, "k", x),
                v = ProjectFrom(fqn, "v", x);
    const Array heads = reference::AttentionForward(q, k, v, m.n_heads, m.causal);
    const Array dheads = ProjectBackward(fqn, "o", heads, dy);
    const reference::AttentionGradients g =
        reference::AttentionBackward(q, k, v, m.n_heads, m.causal, dheads);
    Array dx = ProjectBackward(fqn, "q", x, g.dq);
    reference::AddInto(dx, ProjectBackward(fqn, "k", x, g.dk));
    reference::AddInto(dx, ProjectBackward(fqn, "v", x, g.dv));
    return dx;
  }

  // Attention's Linear child `name` applied to x.
  Array ProjectFrom(const std::string& fqn, absl::string_view name, const Array& x) {
    const std::string child = ChildFqn(fqn, std::string(name));
    return reference::LinearForward(x, Param(child, "weight"), OptionalParam(child, "bias"));
  }

  Array ProjectBackward(const std::string& fqn, absl::string_view name, const Array& x,
                        const Array& dy) {
    const std::string child = ChildFqn(fqn, std::string(name));
    return reference::LinearBackward(x, Param(child, "weight"), dy, Grad(child, "weight"),
                                     OptionalGrad(child, "bias"));
  }

  const Array& Param(const std::string& fqn, absl::string_view local) const {
    return params_.at(ChildFqn(fqn, std::string(local)));
  }
  const Array* OptionalParam(const std::string& fqn, absl::string_view local) const {
    auto it = params_.find(ChildFqn(fqn, std::string(local)));
    return it == params_.end() ? nullptr : &it->second;
  }
  Array& Grad(const std::string& fqn, absl::string_view local) {
    return grads_->at(ChildFqn(fqn, std::string(local)));
  }
  Array* OptionalGrad(const std::string& fqn, absl::string_view local) {
    auto it = grads_->find(ChildFqn(fqn, std::string(local)));
    return it == grads_->end() ? nullptr : &it->second;
  }

  const std::map<std::string, Array>& params_;
  std::map<std::string, Array>* grads_;
};

// A model's parameters in double, checked against its spec: exactly the listed names, each of its
// listed shape, all one dtype.
struct CheckedModel {
  std::map<std::string, Array> params;
  DType dtype = DType::kFloat32;  // the parameters' (the input's when there are none)
};

absl::StatusOr<CheckedModel> CheckModel(const ReferenceModel& model, const HostTensor& input) {
  ASSIGN_OR_RETURN(const std::vector<ReferenceParameter> listed,
                   ListReferenceParameters(model.spec.root));
  CheckedModel checked;
  std::optional<DType> dtype;
  if (IsFloatingPoint(input.dtype())) dtype = input.dtype();
  for (const ReferenceParameter& p : listed) {
    auto it = model.params.find(p.fqn);
    if (it == model.params.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", p.fqn, "' of shape ", ShapeToString(p.shape), " is missing"));
    }
    if (it->second.shape() != p.shape) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", p.fqn, "' has shape ",
                                                     ShapeToString(it->second.shape()),
                                                     ", the spec says ", ShapeToString(p.shape)));
    }
    if (dtype.has_value() && it->second.dtype() != *dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", p.fqn, "' has dtype ", DTypeName(it->second.dtype()), ", expected ",
          DTypeName(*dtype), " (the input's and the other parameters')"));
    }
    dtype = it->second.dtype();
    ASSIGN_OR_RETURN(Array values,
                     reference::ArrayFromTensor(it->second, absl::StrCat("parameter ", p.fqn)));
    checked.params.emplace(p.fqn, std::move(values));
  }
  if (checked.params.size() != model.params.size()) {
    for (const auto& [fqn, tensor] : model.params) {
      if (!checked.params.contains(fqn)) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter '", fqn, "' is not one of the spec's"));
      }
    }
  }
  if (!dtype.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("input of dtype ", DTypeName(input.dtype()),
                                                   " to a model without parameters"));
  }
  checked.dtype = *dtype;
  return checked;
}

absl::StatusOr<Value> InputValue(const HostTensor& input) {
  if (input.dtype() == DType::kInt64) return reference::IdsFromTensor(input, "input");
  return reference::ArrayFromTensor(input, "input");
}

}  // namespace

absl::StatusOr<HostTensor> ReferenceForward(const ReferenceModel& model, const HostTensor& input) {
  ASSIGN_OR_RETURN(const CheckedModel checked, CheckModel(model, input));
  ASSIGN_OR_RETURN(const Value x, InputValue(input));
  Evaluator evaluator(checked.params, nullptr);
  ASSIGN_OR_RETURN(const Value y, evaluator.Forward(model.spec.root, "", x));
  if (!std::holds_alternative<Array>(y)) {
    return absl::InvalidArgumentError("the model's output is its int64 input: it has no Embedding");
  }
  return reference::TensorFromArray(std::get<Array>(y), checked.dtype);
}

absl::StatusOr<ReferenceStep> ReferenceBackward(const ReferenceModel& model,
                                                const HostTensor& input,
                                                const HostTensor* grad_output) {
  ASSIGN_OR_RETURN(const CheckedModel checked, CheckModel(model, input));
  ASSIGN_OR_RETURN(const Value x, InputValue(input));
  std::map<std::string, Array> grads;
  for (const auto& [fqn, values] : checked.params)
    grads.emplace(fqn, reference::Zeros(values.shape));
  Evaluator evaluator(checked.params, &grads);
  ASSIGN_OR_RETURN(const Value y, evaluator.Forward(model.spec.root, "", x));
  if (!std::holds_alternative<Array>(y)) {
    return absl::InvalidArgumentError("the model's output is its int64 input: it has no Embedding");
  }
  const Array& output = std::get<Array>(y);
  Array dy{output.shape, std::vector<double>(output.values.size(), 1.0)};
  if (grad_output != nullptr) {
    if (grad_output->shape() != output.shape || grad_output->dtype() != checked.dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("grad_output is ", DTypeName(grad_output->dtype()), " ",
                       ShapeToString(grad_output->shape()), "; the output is ",
                       DTypeName(checked.dtype), " ", ShapeToString(output.shape)));
    }
    ASSIGN_OR_RETURN(dy, reference::ArrayFromTensor(*grad_output, "grad_output"));
  }
  ASSIGN_OR_RETURN(std::optional<Array> dx, evaluator.Backward(model.spec.root, "", x, dy));
  ReferenceStep step;
  step.output = reference::TensorFromArray(output, checked.dtype);
  for (const auto& [fqn, grad] : grads) {
    step.grads.emplace(fqn, reference::TensorFromArray(grad, checked.dtype));
  }
  if (dx.has_value()) step.grad_input = reference::TensorFromArray(*dx, checked.dtype);
  return step;
}

}  // namespace tessera
