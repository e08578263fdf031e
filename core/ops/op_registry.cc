#include "core/ops/op_registry.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::ops {

absl::string_view OpFamilyName(OpFamily family) {
  switch (family) {
    case OpFamily::kPointwise:
      return "pointwise";
    case OpFamily::kReduction:
      return "reduction";
    case OpFamily::kMatmul:
      return "matmul";
    case OpFamily::kView:
      return "view";
    case OpFamily::kTensor:
      return "tensor";
    case OpFamily::kFactory:
      return "factory";
    case OpFamily::kNn:
      return "nn";
  }
  return "unknown";
}

void OpRegistry::Add(std::unique_ptr<OpDef> op) { ops_.push_back(std::move(op)); }

void OpRegistry::Finish() {
  for (const std::unique_ptr<OpDef>& op : ops_) {
    const bool added = by_name_.emplace(op->qualified_name, op.get()).second;
    if (!added) {
      std::cerr << "op registry: " << op->qualified_name << " is registered twice\n";
      std::abort();
    }
    sorted_.push_back(op.get());
  }
  std::sort(sorted_.begin(), sorted_.end(),
            [](const OpDef* a, const OpDef* b) { return a->qualified_name < b->qualified_name; });
}

absl::StatusOr<const OpDef*> OpRegistry::Find(absl::string_view name) const {
  std::string full(name);
  if (!absl::StartsWith(full, "aten::")) full = absl::StrCat("aten::", full);
  if (auto it = by_name_.find(full); it != by_name_.end()) return it->second;
  // "softmax": the default overload, else the only one.
  std::vector<const OpDef*> overloads;
  const std::string prefix = absl::StrCat(full, ".");
  for (const OpDef* op : sorted_) {
    if (absl::StartsWith(op->qualified_name, prefix)) overloads.push_back(op);
  }
  if (overloads.size() == 1 && full.find('.') == std::string::npos) return overloads[0];
  if (!overloads.empty() && full.find('.') == std::string::npos) {
    std::vector<std::string> names;
    for (const OpDef* op : overloads) names.push_back(op->qualified_name);
    return absl::InvalidArgumentError(absl::StrCat(
        "op '", name, "' has several overloads; name one of ", absl::StrJoin(names, ", ")));
  }
  return absl::UnimplementedError(
      absl::StrCat("op '", name, "' is not in Tessera's op set (`tessera ops list` shows it)"));
}

const OpRegistry& Registry() {
  static const OpRegistry* const registry = [] {
    auto* r = new OpRegistry;
    RegisterPointwiseOps(*r);
    RegisterReductionOps(*r);
    RegisterMatmulOps(*r);
    RegisterViewOps(*r);
    RegisterTensorOps(*r);
    RegisterNormOps(*r);
    RegisterIndexOps(*r);
    RegisterLossOps(*r);
    RegisterFactoryOps(*r);
    r->Finish();
    return r;
  }();
  return *registry;
}

}  // namespace tessera::ops
