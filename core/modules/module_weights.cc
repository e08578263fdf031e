#include "core/modules/module_weights.h"

#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera {
namespace {

// Problems listed in one message at most; the count of the rest is given.
constexpr size_t kMaxListed = 8;

}  // namespace

DType ParameterDType(const ModuleInput& input) {
  return IsFloatingPoint(input.dtype) ? input.dtype : DType::kFloat32;
}

absl::Status CheckWeights(const std::vector<ParameterInfo>& parameters,
                          const std::vector<WeightsTensor>& weights, DType dtype) {
  std::map<std::string, const WeightsTensor*> by_name;
  std::vector<std::string> problems;
  for (const WeightsTensor& w : weights) {
    if (!by_name.emplace(w.name, &w).second) {
      problems.push_back(absl::StrCat("tensor '", w.name, "' is listed twice"));
    }
  }
  std::set<std::string> expected;
  for (const ParameterInfo& p : parameters) {
    expected.insert(p.fqn);
    auto it = by_name.find(p.fqn);
    if (it == by_name.end()) {
      problems.push_back(
          absl::StrCat("parameter '", p.fqn, "' ", ShapeToString(p.shape), " is missing"));
      continue;
    }
    const WeightsTensor& w = *it->second;
    if (w.shape != p.shape) {
      problems.push_back(absl::StrCat("parameter '", p.fqn, "' is ", ShapeToString(p.shape),
                                      " in the spec but ", ShapeToString(w.shape),
                                      " in the weights"));
    }
    if (w.dtype != dtype) {
      problems.push_back(absl::StrCat("parameter '", p.fqn, "' is ", DTypeName(w.dtype),
                                      " in the weights; the model's parameters are ",
                                      DTypeName(dtype)));
    }
  }
  for (const WeightsTensor& w : weights) {
    if (!expected.contains(w.name)) {
      problems.push_back(absl::StrCat("tensor '", w.name, "' ", ShapeToString(w.shape),
                                      " is not a parameter of the model"));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  const size_t total = problems.size();
  if (total > kMaxListed) problems.resize(kMaxListed);
  return absl::InvalidArgumentError(
      absl::StrCat("the weights do not fit the spec: ", absl::StrJoin(problems, "; "),
                   total > kMaxListed ? absl::StrCat("; and ", total - kMaxListed, " more") : ""));
}

ParameterInit InitOf(const ModuleSpec& owner, absl::string_view local_name) {
  using Kind = ParameterInit::Kind;
  switch (owner.type) {
    case ModuleType::kLinear:
      return {Kind::kUniform, 1.0 / std::sqrt(static_cast<double>(owner.in_features))};
    case ModuleType::kEmbedding:
      return {Kind::kNormal, 0};
    case ModuleType::kLayerNorm:
    case ModuleType::kRMSNorm:
      return {local_name == "weight" ? Kind::kOnes : Kind::kZeros, 0};
    default:
      // Attention holds its parameters in its q/k/v/o Linears; the others hold none.
      return {Kind::kZeros, 0};
  }
}

}  // namespace tessera
