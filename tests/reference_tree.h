// Names within a spec's tree, shared by the reference's walks (module_reference.cc,
// reference_parameters.cc).
#ifndef TESSERA_TESTS_REFERENCE_TREE_H_
#define TESSERA_TESTS_REFERENCE_TREE_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "core/module_spec.h"

namespace tessera::reference {

// torch's FQN of `child` under `parent`: "parent.child", or "child" under the root ("").
inline std::string ChildFqn(const std::string& parent, const std::string& child) {
  return parent.empty() ? child : absl::StrCat(parent, ".", child);
}

// torch.nn's name of `type` (core's ModuleTypeName, kept here so that the reference stands on
// module_spec.h's structs alone).
inline const char* TypeName(ModuleType type) {
  switch (type) {
    case ModuleType::kLinear:
      return "Linear";
    case ModuleType::kEmbedding:
      return "Embedding";
    case ModuleType::kLayerNorm:
      return "LayerNorm";
    case ModuleType::kRMSNorm:
      return "RMSNorm";
    case ModuleType::kReLU:
      return "ReLU";
    case ModuleType::kGELU:
      return "GELU";
    case ModuleType::kSiLU:
      return "SiLU";
    case ModuleType::kDropout:
      return "Dropout";
    case ModuleType::kAttention:
      return "Attention";
    case ModuleType::kSequential:
      return "Sequential";
    case ModuleType::kModuleList:
      return "ModuleList";
    case ModuleType::kModule:
      return "Module";
  }
  return "unknown";
}

// "module 'layers.0.attn' (Attention)", for error messages.
inline std::string DescribeModule(const std::string& fqn, const ModuleSpec& m) {
  return absl::StrCat("module '", fqn, "' (", TypeName(m.type), ")");
}

// True for the types that only run their children: Sequential, ModuleList, Module.
inline bool IsContainer(ModuleType type) {
  return type == ModuleType::kSequential || type == ModuleType::kModuleList ||
         type == ModuleType::kModule;
}

}  // namespace tessera::reference

#endif  // TESSERA_TESTS_REFERENCE_TREE_H_
