// Names within a spec's tree, shared by the reference's walks (module_reference.cc,
// reference_parameters.cc).
#ifndef TESSERA_REFERENCE_REFERENCE_TREE_H_
#define TESSERA_REFERENCE_REFERENCE_TREE_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "core/modules/module_spec.h"

namespace tessera::reference {

// torch's FQN of `child` under `parent`: "parent.child", or "child" under the root ("").
inline std::string ChildFqn(const std::string& parent, const std::string& child) {
  return parent.empty() ? child : absl::StrCat(parent, ".", child);
}

// "module 'layers.0.attn' (Attention)", for error messages.
inline std::string DescribeModule(const std::string& fqn, const ModuleSpec& m) {
  return absl::StrCat("module '", fqn, "' (", ModuleTypeName(m.type), ")");
}

// True for the types that only run their children: Sequential, ModuleList, Module.
inline bool IsContainer(ModuleType type) {
  return type == ModuleType::kSequential || type == ModuleType::kModuleList ||
         type == ModuleType::kModule;
}

}  // namespace tessera::reference

#endif  // TESSERA_REFERENCE_REFERENCE_TREE_H_
