// The reference's parameters: listing and checking a spec's tree, torch-like random values, and
// torch.optim.SGD (the declarations are in module_reference.h).
#include <cmath>
#include <numbers>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "tests/module_reference.h"
#include "tests/reference_layers.h"
#include "tests/reference_tree.h"

namespace tessera {
namespace {

using reference::Array;
using reference::ChildFqn;
using reference::DescribeModule;

absl::Status CheckPositive(const std::string& fqn, const ModuleSpec& m, absl::string_view field,
                           int64_t value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(DescribeModule(fqn, m), " has ", field, " ", value, "; it must be positive"));
}

// Attention's children: exactly q, k, v and o, each Linear(dim, dim).
absl::Status CheckAttentionChildren(const std::string& fqn, const ModuleSpec& m) {
  std::set<std::string> names;
  for (const ModuleSpec& child : m.children) {
    const bool known =
        child.name == "q" || child.name == "k" || child.name == "v" || child.name == "o";
    if (!known || child.type != ModuleType::kLinear || child.in_features != m.dim ||
        child.out_features != m.dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          DescribeModule(fqn, m), " has child '", child.name, "' (",
          reference::TypeName(child.type), " ", child.in_features, " -> ", child.out_features,
          "); its children are q, k, v, o, each ", "Linear ", m.dim, " -> ", m.dim));
    }
    names.insert(child.name);
  }
  if (names.size() != 4 || m.children.size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(DescribeModule(fqn, m), " has ",
                                                   m.children.size(),
                                                   " children; it needs exactly q, k, v, o"));
  }
  return absl::OkStatus();
}

// The checks of one module's own arguments and children's names (not the children's own).
absl::Status CheckModule(const std::string& fqn, const ModuleSpec& m) {
  switch (m.type) {
    case ModuleType::kLinear:
      RETURN_IF_ERROR(CheckPositive(fqn, m, "in_features", m.in_features));
      RETURN_IF_ERROR(CheckPositive(fqn, m, "out_features", m.out_features));
      break;
    case ModuleType::kEmbedding:
      RETURN_IF_ERROR(CheckPositive(fqn, m, "num_embeddings", m.num_embeddings));
      RETURN_IF_ERROR(CheckPositive(fqn, m, "embedding_dim", m.embedding_dim));
      break;
    case ModuleType::kLayerNorm:
    case ModuleType::kRMSNorm:
      RETURN_IF_ERROR(CheckPositive(fqn, m, "normalized_shape", m.normalized_shape));
      if (!(m.eps >= 0)) {
        return absl::InvalidArgumentError(absl::StrCat(DescribeModule(fqn, m), " has eps ", m.eps));
      }
      break;
    case ModuleType::kGELU:
      if (m.approximate != "none" && m.approximate != "tanh") {
        return absl::InvalidArgumentError(absl::StrCat(DescribeModule(fqn, m), " has approximate '",
                                                       m.approximate, "'; want 'none' or 'tanh'"));
      }
      break;
    case ModuleType::kAttention:
      RETURN_IF_ERROR(CheckPositive(fqn, m, "dim", m.dim));
      RETURN_IF_ERROR(CheckPositive(fqn, m, "n_heads", m.n_heads));
      if (m.dim % m.n_heads != 0) {
        return absl::InvalidArgumentError(absl::StrCat(DescribeModule(fqn, m), " has dim ", m.dim,
                                                       " not divisible by n_heads ", m.n_heads));
      }
      RETURN_IF_ERROR(CheckAttentionChildren(fqn, m));
      break;
    default:
      break;
  }
  if (!reference::IsContainer(m.type) && m.type != ModuleType::kAttention && !m.children.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(DescribeModule(fqn, m), " is a leaf but has ",
                                                   m.children.size(), " children"));
  }
  std::set<std::string> names;
  for (const ModuleSpec& child : m.children) {
    if (child.name.empty() || absl::StrContains(child.name, '.') ||
        !names.insert(child.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(DescribeModule(fqn, m), " has a child named '",
                                                     child.name,
                                                     "'; names are non-empty, dot-free, unique"));
    }
  }
  return absl::OkStatus();
}

// The (local name, shape) pairs `m` itself holds, weight before bias.
std::vector<std::pair<std::string, Shape>> OwnShapes(const ModuleSpec& m) {
  switch (m.type) {
    case ModuleType::kLinear:
      if (m.bias) return {{"weight", {m.out_features, m.in_features}}, {"bias", {m.out_features}}};
      return {{"weight", {m.out_features, m.in_features}}};
    case ModuleType::kEmbedding:
      return {{"weight", {m.num_embeddings, m.embedding_dim}}};
    case ModuleType::kLayerNorm:
      if (!m.elementwise_affine) return {};
      return {{"weight", {m.normalized_shape}}, {"bias", {m.normalized_shape}}};
    case ModuleType::kRMSNorm:
      if (!m.elementwise_affine) return {};
      return {{"weight", {m.normalized_shape}}};
    default:
      return {};
  }
}

absl::Status AppendParameters(const std::string& fqn, const ModuleSpec& m,
                              std::vector<ReferenceParameter>& out) {
  RETURN_IF_ERROR(CheckModule(fqn, m));
  for (auto& [name, shape] : OwnShapes(m)) {
    out.push_back({ChildFqn(fqn, name), std::move(shape), &m, name});
  }
  for (const ModuleSpec& child : m.children) {
    RETURN_IF_ERROR(AppendParameters(ChildFqn(fqn, child.name), child, out));
  }
  return absl::OkStatus();
}

// A platform-independent draw in [0, 1) (std's distributions differ between libraries).
double Uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// A platform-independent N(0, 1) draw (Box-Muller).
double StandardNormal(std::mt19937_64& rng) {
  const double u1 = 1.0 - Uniform01(rng);  // in (0, 1]
  const double u2 = Uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// torch's initial value for one element of `p`.
double InitialValue(const ReferenceParameter& p, std::mt19937_64& rng) {
  switch (p.module->type) {
    case ModuleType::kLinear: {
      const double bound = 1.0 / std::sqrt(static_cast<double>(p.module->in_features));
      return (2.0 * Uniform01(rng) - 1.0) * bound;
    }
    case ModuleType::kEmbedding:
      return StandardNormal(rng);
    default:
      return p.local_name == "weight" ? 1.0 : 0.0;
  }
}

}  // namespace

absl::StatusOr<std::vector<ReferenceParameter>> ListReferenceParameters(const ModuleSpec& root) {
  std::vector<ReferenceParameter> out;
  RETURN_IF_ERROR(AppendParameters("", root, out));
  return out;
}

absl::StatusOr<std::map<std::string, HostTensor>> RandomParameters(const ModelSpec& spec,
                                                                   uint64_t seed, DType dtype) {
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) {
    return absl::InvalidArgumentError(absl::StrCat("parameters of dtype ", DTypeName(dtype),
                                                   "; the reference takes float32 or float64"));
  }
  ASSIGN_OR_RETURN(const std::vector<ReferenceParameter> params,
                   ListReferenceParameters(spec.root));
  std::mt19937_64 rng(seed);
  std::map<std::string, HostTensor> out;
  for (const ReferenceParameter& p : params) {
    Array values = reference::Zeros(p.shape);
    for (double& v : values.values) v = InitialValue(p, rng);
    out.emplace(p.fqn, reference::TensorFromArray(values, dtype));
  }
  return out;
}

absl::Status ReferenceSgd(ReferenceModel& model, const std::map<std::string, HostTensor>& grads,
                          const ReferenceSgdOptions& options,
                          std::map<std::string, HostTensor>& momentum_buffers) {
  // Everything is read and checked before anything is written.
  struct Update {
    const std::string* fqn;
    HostTensor* param;
    Array value, grad;
    std::optional<Array> buffer;
  };
  for (const auto& [fqn, grad] : grads) {
    if (!model.params.contains(fqn)) {
      return absl::InvalidArgumentError(absl::StrCat("gradient of unknown parameter '", fqn, "'"));
    }
  }
  std::vector<Update> updates;
  for (auto& [fqn, param] : model.params) {
    auto grad = grads.find(fqn);
    if (grad == grads.end()) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", fqn, "' has no gradient"));
    }
    if (grad->second.shape() != param.shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient of '", fqn, "' has shape ", ShapeToString(grad->second.shape()),
                       ", its parameter ", ShapeToString(param.shape())));
    }
    Update u{&fqn, &param, {}, {}, std::nullopt};
    ASSIGN_OR_RETURN(u.value, reference::ArrayFromTensor(param, absl::StrCat("parameter ", fqn)));
    ASSIGN_OR_RETURN(u.grad,
                     reference::ArrayFromTensor(grad->second, absl::StrCat("gradient of ", fqn)));
    if (auto buffer = momentum_buffers.find(fqn);
        options.momentum != 0 && buffer != momentum_buffers.end()) {
      if (buffer->second.shape() != param.shape()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "momentum buffer of '", fqn, "' has shape ", ShapeToString(buffer->second.shape()),
            ", its parameter ", ShapeToString(param.shape())));
      }
      ASSIGN_OR_RETURN(u.buffer, reference::ArrayFromTensor(
                                     buffer->second, absl::StrCat("momentum buffer of ", fqn)));
    }
    updates.push_back(std::move(u));
  }
  for (Update& u : updates) {
    Array step = std::move(u.grad);
    for (size_t i = 0; i < step.values.size(); ++i) {
      step.values[i] += options.weight_decay * u.value.values[i];
    }
    if (options.momentum != 0) {
      if (u.buffer.has_value()) {
        for (size_t i = 0; i < step.values.size(); ++i) {
          step.values[i] += options.momentum * u.buffer->values[i];
        }
      }
      momentum_buffers.insert_or_assign(*u.fqn, reference::TensorFromArray(step, u.param->dtype()));
    }
    for (size_t i = 0; i < step.values.size(); ++i) {
      u.value.values[i] -= options.lr * step.values[i];
    }
    *u.param = reference::TensorFromArray(u.value, u.param->dtype());
  }
  return absl::OkStatus();
}

}  // namespace tessera
