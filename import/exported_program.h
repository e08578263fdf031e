// The ExportedProgram of a torch.export archive read as a graph of registered ops: its
// signature (parameters, buffers, constants and user inputs by their state_dict names), every
// node with its arguments as the registry binds them, the module each node comes from, and the
// shape and dtype torch recorded for every value.
#ifndef TESSERA_IMPORT_EXPORTED_PROGRAM_H_
#define TESSERA_IMPORT_EXPORTED_PROGRAM_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/ops/op_registry.h"
#include "core/ops/op_schema.h"
#include "core/shape.h"
#include "nlohmann/json.hpp"

namespace tessera::import {

// What a graph input is, as the program's signature says.
enum class InputKind { kParameter, kBuffer, kConstant, kUserInput };
// "parameter", "buffer", "constant", "user input".
const char* InputKindName(InputKind kind);

struct ProgramInput {
  InputKind kind = InputKind::kUserInput;
  std::string name;  // the graph's value ("p_model_embed_tokens_weight", "input_ids")
  std::string
      target;  // the state_dict name ("model.embed_tokens.weight"); the name for a user input
};

// One node: a registered op by the registry's name, its arguments (a TensorRef or a TensorList
// element is a value of the program), and the values it writes (one per output, in order).
struct ProgramNode {
  std::string op;
  std::vector<ops::NamedValue> args;
  std::vector<int> outputs;
  std::string name;    // torch's node name ("linear_3")
  std::string module;  // the innermost module it ran in ("model.layers.0.mlp.up_proj"), or ""
};

// A program read from an archive. Values are numbered: the inputs first (value i is inputs[i]),
// then each node's outputs in order.
struct ExportedProgram {
  std::vector<ProgramInput> inputs;
  std::vector<ProgramNode> nodes;
  std::vector<std::string> value_names;
  std::vector<ops::TensorMeta> value_metas;  // as torch recorded them
  std::vector<int> outputs;                  // the user outputs, in order
  std::vector<std::string> output_names;
  // Nodes torch's graph has that import answers itself: each _assert_tensor_metadata, checked
  // against the recorded metas and dropped (as torch's own passes drop it); each to.device, run
  // as to.dtype (a mesh's tensors are on its device). Counted by op.
  std::map<std::string, int64_t> resolved;
  // Every module a node ran in, by FQN ("" the root), with its class as nn_module_stack names it
  // ("torch.nn.modules.linear.Linear", "transformers.pytorch_utils.Conv1D").
  std::map<std::string, std::string> module_types;

  int num_values() const { return static_cast<int>(value_names.size()); }
};

// "float32[2, 8]": how messages show a value's dtype and shape.
std::string MetaText(const Shape& shape, DType dtype);

// A JSON value as messages show it: compact, at most 160 characters (then "..."); never throws.
std::string Shown(const nlohmann::json& value);

// The dtype of the serializer's ScalarType code (torch/_export/serde/schema.py: 7 float32, 5
// int64, 12 bool, ...); INVALID_ARGUMENT naming the code for one Tessera has no dtype for.
absl::StatusOr<DType> DTypeOfScalarType(int64_t code);

// A serialized TensorMeta's shape and dtype ({"dtype": 7, "sizes": [{"as_int": 2}], ...});
// `what` names it in messages. UNIMPLEMENTED for a symbolic size.
absl::StatusOr<ops::TensorMeta> ReadTensorMeta(const nlohmann::json& meta, const std::string& what);

// The program of a model JSON (`what` names it in messages). INVALID_ARGUMENT naming the node and
// the argument for what does not read: a value used before it is written, an unknown argument
// kind, a size that is not a number, a missing member; UNIMPLEMENTED for what import does not
// take (dynamic shapes, a buffer the program mutates, outputs other than user outputs). Ops the
// registry lacks are kept by name: UnregisteredOps lists them.
absl::StatusOr<ExportedProgram> ParseExportedProgram(const nlohmann::json& model,
                                                     const std::string& what);

// How import answers a node of op `op` itself (checks _assert_tensor_metadata against the
// recorded metas and drops it; runs to.device as to.dtype), in words; null for an op it does not.
const char* ResolvedByImport(const std::string& op);

// How many nodes call each op the registry lacks (by exact name), sorted by name.
std::map<std::string, int64_t> UnregisteredOps(const ExportedProgram& program);

}  // namespace tessera::import

#endif  // TESSERA_IMPORT_EXPORTED_PROGRAM_H_
