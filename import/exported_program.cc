#include "import/exported_program.h"

#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/checked_math.h"
#include "core/json.h"
#include "core/shape.h"
#include "core/status_macros.h"
#include "import/pt2_archive.h"

namespace tessera::import {
namespace {

using nlohmann::json;

// The serializer's enums (torch/_export/serde/schema.py) that arguments carry.
constexpr int64_t kPositional = 1;     // ArgumentKind.POSITIONAL
constexpr int64_t kKeyword = 2;        // ArgumentKind.KEYWORD
constexpr int64_t kStrided = 7;        // Layout.Strided
constexpr int64_t kContiguous = 1;     // MemoryFormat.ContiguousFormat
constexpr int64_t kPreserve = 4;       // MemoryFormat.PreserveFormat
constexpr int64_t kUnknownFormat = 0;  // MemoryFormat.Unknown

absl::Status Invalid(const std::string& what, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", why));
}

// The member `key` of the object `j`, or null.
const json* Get(const json& j, const std::string& key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

// The string member `key` of `j`: INVALID_ARGUMENT naming `what` otherwise.
absl::StatusOr<std::string> String(const json& j, const std::string& key, const std::string& what) {
  const json* v = Get(j, key);
  if (v == nullptr || !v->is_string()) {
    return Invalid(what, absl::StrCat("has no string '", key, "'"));
  }
  return v->get<std::string>();
}

absl::StatusOr<int64_t> Integer(const json& j, const std::string& what) {
  absl::StatusOr<int64_t> n = JsonInt64(j);
  if (!n.ok()) return Invalid(what, absl::StrCat(Shown(j), ": ", n.status().message()));
  return *n;
}

// The name a tensor argument ({"name": ...}) refers to.
absl::StatusOr<std::string> TensorName(const json& j, const std::string& what) {
  return String(j, "name", what);
}

// A symbolic int as the serializer writes one ({"as_int": 6}); a symbol is a dynamic shape.
absl::StatusOr<int64_t> SymInt(const json& j, const std::string& what) {
  if (const json* v = Get(j, "as_int")) return Integer(*v, what);
  if (Get(j, "as_expr") != nullptr || Get(j, "as_name") != nullptr) {
    return absl::UnimplementedError(
        absl::StrCat(what, ": a symbolic size (", Shown(j),
                     "); export with static shapes (no dynamic_shapes) to load the program"));
  }
  return Invalid(what, absl::StrCat(Shown(j), " is not a size"));
}

}  // namespace

absl::StatusOr<ops::TensorMeta> ReadTensorMeta(const json& j, const std::string& what) {
  const json* dtype = Get(j, "dtype");
  const json* sizes = Get(j, "sizes");
  if (dtype == nullptr || sizes == nullptr || !sizes->is_array()) {
    return Invalid(what, "its tensor meta has no dtype and sizes");
  }
  ops::TensorMeta meta;
  ASSIGN_OR_RETURN(const int64_t code, Integer(*dtype, what + "'s dtype"));
  absl::StatusOr<DType> d = DTypeOfScalarType(code);
  if (!d.ok()) return Invalid(what, d.status().message());
  meta.dtype = *d;
  for (const json& s : *sizes) {
    ASSIGN_OR_RETURN(const int64_t n, SymInt(s, what));
    if (n < 0) return Invalid(what, absl::StrCat("a size of ", n));
    meta.shape.push_back(n);
  }
  if (!CheckedProduct(meta.shape).has_value()) {
    return Invalid(what, absl::StrCat("a shape of more elements than an int64 counts: ",
                                      ShapeToString(meta.shape)));
  }
  return meta;
}

namespace {

// `text` split on `sep` where it stands outside brackets and parentheses, as torch's own
// metadata_split does (a path such as "layers.slice(None, 2, None).0" holds commas).
std::vector<absl::string_view> SplitOutsideBrackets(absl::string_view text, char sep) {
  std::vector<absl::string_view> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
    if (c == sep && depth == 0) {
      out.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  out.push_back(text.substr(start));
  return out;
}

// The modules of a node's nn_module_stack ("L__self__,,Cls;L__self__model,model,Cls"), outermost
// first, as (FQN, class) pairs.
std::vector<std::pair<std::string, std::string>> ModuleStack(const json& node) {
  std::vector<std::pair<std::string, std::string>> out;
  const json* metadata = Get(node, "metadata");
  const json* stack = metadata == nullptr ? nullptr : Get(*metadata, "nn_module_stack");
  if (stack == nullptr || !stack->is_string()) return out;
  const std::string text = stack->get<std::string>();
  for (absl::string_view frame : SplitOutsideBrackets(text, ';')) {
    if (frame.empty()) continue;
    const std::vector<absl::string_view> fields = SplitOutsideBrackets(frame, ',');
    if (fields.size() >= 3) out.emplace_back(std::string(fields[1]), std::string(fields[2]));
  }
  return out;
}

// Reads programs: value names to numbers, arguments to op values.
class ProgramReader {
 public:
  explicit ProgramReader(std::string what) : what_(std::move(what)) {}

  absl::StatusOr<ExportedProgram> Read(const json& model);

 private:
  // A new value named `name` with the meta torch recorded for it.
  absl::StatusOr<int> AddValue(const std::string& name, const std::string& where);
  absl::StatusOr<int> Value(const std::string& name, const std::string& where) const;
  absl::Status ReadSignature(const json& signature);
  absl::StatusOr<ops::OpValue> Argument(const json& arg, const std::string& where) const;
  absl::Status ReadNode(const json& node, int k);

  const std::string what_;
  const json* tensor_values_ = nullptr;
  absl::flat_hash_map<std::string, int> values_;
  ExportedProgram program_;
};

absl::StatusOr<int> ProgramReader::AddValue(const std::string& name, const std::string& where) {
  if (values_.contains(name)) {
    return Invalid(where, absl::StrCat("value '", name, "' is written twice"));
  }
  const json* meta = Get(*tensor_values_, name);
  if (meta == nullptr) {
    return Invalid(where, absl::StrCat("value '", name, "' has no entry in tensor_values"));
  }
  ASSIGN_OR_RETURN(ops::TensorMeta m,
                   ReadTensorMeta(*meta, absl::StrCat(where, ", value '", name, "'")));
  const int v = program_.num_values();
  values_[name] = v;
  program_.value_names.push_back(name);
  program_.value_metas.push_back(std::move(m));
  return v;
}

absl::StatusOr<int> ProgramReader::Value(const std::string& name, const std::string& where) const {
  auto it = values_.find(name);
  if (it == values_.end()) {
    return Invalid(where, absl::StrCat("value '", name, "' is read before anything writes it"));
  }
  return it->second;
}

absl::Status ProgramReader::ReadSignature(const json& signature) {
  const json* specs = Get(signature, "input_specs");
  if (specs == nullptr || !specs->is_array()) return Invalid(what_, "no signature input_specs");
  for (size_t i = 0; i < specs->size(); ++i) {
    const json& spec = (*specs)[i];
    const std::string where = absl::StrCat(what_, ": input ", i);
    ProgramInput in;
    const json* body = nullptr;
    std::string name_key;
    if ((body = Get(spec, "parameter")) != nullptr) {
      in.kind = InputKind::kParameter;
      name_key = "parameter_name";
    } else if ((body = Get(spec, "buffer")) != nullptr) {
      in.kind = InputKind::kBuffer;
      name_key = "buffer_name";
    } else if ((body = Get(spec, "tensor_constant")) != nullptr) {
      in.kind = InputKind::kConstant;
      name_key = "tensor_constant_name";
    } else if ((body = Get(spec, "user_input")) != nullptr) {
      in.kind = InputKind::kUserInput;
    } else {
      return absl::UnimplementedError(
          absl::StrCat(where, " is ", spec.is_object() && !spec.empty() ? spec.begin().key() : "?",
                       "; import takes parameters, buffers, tensor constants and tensor inputs"));
    }
    const json* arg = Get(*body, "arg");
    if (arg == nullptr) return Invalid(where, "has no arg");
    if (in.kind == InputKind::kUserInput) {
      const json* t = Get(*arg, "as_tensor");
      if (t == nullptr) {
        return absl::UnimplementedError(absl::StrCat(
            where, " is ", Shown(*arg), "; import takes tensor inputs only (no Python numbers)"));
      }
      ASSIGN_OR_RETURN(in.name, TensorName(*t, where));
      in.target = in.name;
    } else {
      ASSIGN_OR_RETURN(in.name, TensorName(*arg, where));
      ASSIGN_OR_RETURN(in.target, String(*body, name_key, where));
    }
    RETURN_IF_ERROR(AddValue(in.name, where).status());
    program_.inputs.push_back(std::move(in));
  }
  return absl::OkStatus();
}

absl::StatusOr<ops::OpValue> ProgramReader::Argument(const json& arg,
                                                     const std::string& where) const {
  if (!arg.is_object() || arg.size() != 1) return Invalid(where, Shown(arg) + " is no argument");
  const std::string& kind = arg.begin().key();
  const json& v = arg.begin().value();
  if (kind == "as_none") return ops::NoneValue{};
  if (kind == "as_tensor") {
    ASSIGN_OR_RETURN(const std::string name, TensorName(v, where));
    ASSIGN_OR_RETURN(const int value, Value(name, where));
    return ops::TensorRef{value};
  }
  if (kind == "as_tensors" || kind == "as_optional_tensors") {
    if (!v.is_array()) return Invalid(where, kind + " is not a list");
    ops::TensorList list;
    for (const json& t : v) {
      const json* named = kind == "as_tensors" ? &t : Get(t, "as_tensor");
      if (named == nullptr) {
        if (Get(t, "as_none") == nullptr) return Invalid(where, Shown(t) + " is no tensor");
        list.indices.push_back(-1);
        continue;
      }
      ASSIGN_OR_RETURN(const std::string name, TensorName(*named, where));
      ASSIGN_OR_RETURN(const int value, Value(name, where));
      list.indices.push_back(value);
    }
    return list;
  }
  if (kind == "as_int") return Integer(v, where);
  if (kind == "as_sym_int") return SymInt(v, where);
  if (kind == "as_ints" || kind == "as_sym_ints") {
    if (!v.is_array()) return Invalid(where, kind + " is not a list");
    std::vector<int64_t> ints;
    for (const json& i : v) {
      if (kind == "as_ints") {
        ASSIGN_OR_RETURN(const int64_t n, Integer(i, where));
        ints.push_back(n);
      } else {
        ASSIGN_OR_RETURN(const int64_t n, SymInt(i, where));
        ints.push_back(n);
      }
    }
    return ints;
  }
  if (kind == "as_float") {
    // torch's serializer writes an infinite or NaN float as a string.
    if (v.is_string()) {
      const std::string f = v.get<std::string>();
      if (f == "Infinity") return std::numeric_limits<double>::infinity();
      if (f == "-Infinity") return -std::numeric_limits<double>::infinity();
      if (f == "NaN") return std::numeric_limits<double>::quiet_NaN();
    }
    if (!v.is_number()) return Invalid(where, Shown(v) + " is not a number");
    return v.get<double>();
  }
  if (kind == "as_bool") {
    if (!v.is_boolean()) return Invalid(where, Shown(v) + " is not a bool");
    return v.get<bool>();
  }
  if (kind == "as_string") {
    if (!v.is_string()) return Invalid(where, Shown(v) + " is not a string");
    return v.get<std::string>();
  }
  if (kind == "as_scalar_type") {
    ASSIGN_OR_RETURN(const int64_t code, Integer(v, where));
    absl::StatusOr<DType> d = DTypeOfScalarType(code);
    if (!d.ok()) return Invalid(where, d.status().message());
    return *d;
  }
  // A device is the mesh's; a strided layout and a contiguous or preserved memory format are the
  // only ones there are: each binds as None.
  if (kind == "as_device") return ops::NoneValue{};
  if (kind == "as_layout") {
    ASSIGN_OR_RETURN(const int64_t code, Integer(v, where));
    if (code != kStrided) {
      return absl::UnimplementedError(
          absl::StrCat(where, ": layout ", code, "; tensors are strided (layout 7) only"));
    }
    return ops::NoneValue{};
  }
  if (kind == "as_memory_format") {
    ASSIGN_OR_RETURN(const int64_t code, Integer(v, where));
    if (code != kContiguous && code != kPreserve && code != kUnknownFormat) {
      return absl::UnimplementedError(
          absl::StrCat(where, ": memory format ", code, "; contiguous (1) and preserve (4) only"));
    }
    return ops::NoneValue{};
  }
  return absl::UnimplementedError(absl::StrCat(where, ": an argument of kind ", kind,
                                               " (import reads tensors, numbers, lists of ints, "
                                               "bools, strings, dtypes, devices and None)"));
}

absl::Status ProgramReader::ReadNode(const json& node, int k) {
  ASSIGN_OR_RETURN(const std::string target,
                   String(node, "target", absl::StrCat(what_, ": node ", k)));
  ProgramNode out;
  out.op = RegistryName(target);
  const json* name = Get(node, "name");
  out.name = name != nullptr && name->is_string() ? name->get<std::string>() : absl::StrCat(k);
  for (auto& [fqn, type] : ModuleStack(node)) {
    out.module = fqn;
    program_.module_types.emplace(fqn, std::move(type));
  }
  const std::string where = absl::StrCat(what_, ": node ", k, " '", out.name, "' (", out.op, ")");
  const json* inputs = Get(node, "inputs");
  const json* outputs = Get(node, "outputs");
  if (inputs == nullptr || !inputs->is_array() || outputs == nullptr || !outputs->is_array()) {
    return Invalid(where, "has no inputs and outputs lists");
  }
  std::vector<std::string> arg_names;  // as the archive names each argument, positional or not
  for (const json& in : *inputs) {
    const json* arg = Get(in, "arg");
    const json* kind = Get(in, "kind");
    ASSIGN_OR_RETURN(const std::string arg_name, String(in, "name", where));
    if (arg == nullptr || kind == nullptr) return Invalid(where, Shown(in) + " is no argument");
    const std::string arg_where = absl::StrCat(where, ", argument '", arg_name, "'");
    ASSIGN_OR_RETURN(const int64_t kind_code, Integer(*kind, arg_where));
    if (kind_code != kPositional && kind_code != kKeyword) {
      return Invalid(arg_where, absl::StrCat("argument kind ", kind_code));
    }
    // to.device runs as to.dtype: the device argument goes (it binds as None anyway).
    if (out.op == "aten::to.device" && arg_name == "device") continue;
    ASSIGN_OR_RETURN(ops::OpValue value, Argument(*arg, arg_where));
    out.args.push_back({kind_code == kKeyword ? arg_name : "", std::move(value)});
    arg_names.push_back(arg_name);
  }
  if (out.op == "aten::_assert_tensor_metadata") {
    // Checked here against the recorded metas, and dropped.
    const ops::TensorMeta* a = nullptr;
    for (size_t i = 0; i < out.args.size(); ++i) {
      const ops::NamedValue& arg = out.args[i];
      if (const auto* t = std::get_if<ops::TensorRef>(&arg.value); t != nullptr && i == 0) {
        a = &program_.value_metas[t->index];
      } else if (a != nullptr && arg_names[i] == "dtype") {
        if (const auto* d = std::get_if<DType>(&arg.value); d != nullptr && *d != a->dtype) {
          return Invalid(where, absl::StrCat("asserts dtype ", DTypeName(*d), " of a ",
                                             DTypeName(a->dtype), " value"));
        }
      } else if (a != nullptr && arg_names[i] == "size") {
        if (const auto* s = std::get_if<std::vector<int64_t>>(&arg.value);
            s != nullptr && *s != a->shape) {
          return Invalid(where, absl::StrCat("asserts size ", ShapeToString(*s), " of a ",
                                             ShapeToString(a->shape), " value"));
        }
      }
    }
    if (a == nullptr) return Invalid(where, "asserts on no tensor");
    if (!outputs->empty()) return Invalid(where, "has outputs; it returns none");
    ++program_.resolved[out.op];
    return absl::OkStatus();
  }
  if (out.op == "aten::to.device") {
    ++program_.resolved[out.op];
    out.op = "aten::to.dtype";
  }
  for (const json& o : *outputs) {
    if (const json* t = Get(o, "as_tensor")) {
      ASSIGN_OR_RETURN(const std::string n, TensorName(*t, where));
      ASSIGN_OR_RETURN(const int v, AddValue(n, where));
      out.outputs.push_back(v);
    } else if (const json* ts = Get(o, "as_tensors"); ts != nullptr && ts->is_array()) {
      for (const json& t : *ts) {
        ASSIGN_OR_RETURN(const std::string n, TensorName(t, where));
        ASSIGN_OR_RETURN(const int v, AddValue(n, where));
        out.outputs.push_back(v);
      }
    } else {
      return absl::UnimplementedError(
          absl::StrCat(where, ": an output ", Shown(o), " (import takes tensor outputs)"));
    }
  }
  if (out.outputs.empty()) return Invalid(where, "writes no value");
  program_.nodes.push_back(std::move(out));
  return absl::OkStatus();
}

absl::StatusOr<ExportedProgram> ProgramReader::Read(const json& model) {
  const json* module = Get(model, "graph_module");
  const json* graph = module == nullptr ? nullptr : Get(*module, "graph");
  const json* signature = module == nullptr ? nullptr : Get(*module, "signature");
  if (graph == nullptr || signature == nullptr) {
    return Invalid(what_, "no graph_module with a graph and a signature");
  }
  tensor_values_ = Get(*graph, "tensor_values");
  if (tensor_values_ == nullptr || !tensor_values_->is_object()) {
    return Invalid(what_, "the graph has no tensor_values");
  }
  RETURN_IF_ERROR(ReadSignature(*signature));
  ASSIGN_OR_RETURN(const json* nodes, GraphNodes(model, what_));
  for (size_t k = 0; k < nodes->size(); ++k) {
    RETURN_IF_ERROR(ReadNode((*nodes)[k], static_cast<int>(k)));
  }
  const json* outs = Get(*signature, "output_specs");
  if (outs == nullptr || !outs->is_array()) return Invalid(what_, "no signature output_specs");
  for (size_t i = 0; i < outs->size(); ++i) {
    const json& spec = (*outs)[i];
    const std::string where = absl::StrCat(what_, ": output ", i);
    const json* user = Get(spec, "user_output");
    if (user == nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          where, " is ", spec.is_object() && !spec.empty() ? spec.begin().key() : "?",
          "; import takes programs whose outputs are user outputs (no buffer mutations)"));
    }
    const json* arg = Get(*user, "arg");
    const json* t = arg == nullptr ? nullptr : Get(*arg, "as_tensor");
    if (t == nullptr) return absl::UnimplementedError(where + ": not a tensor");
    ASSIGN_OR_RETURN(const std::string name, TensorName(*t, where));
    ASSIGN_OR_RETURN(const int v, Value(name, where));
    program_.outputs.push_back(v);
    program_.output_names.push_back(name);
  }
  if (program_.outputs.empty()) return Invalid(what_, "the program has no output");
  return std::move(program_);
}

}  // namespace

std::string MetaText(const Shape& shape, DType dtype) {
  return absl::StrCat(DTypeName(dtype), ShapeToString(shape));
}

std::string Shown(const nlohmann::json& value) {
  size_t most = 160;
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() <= most) return text;
  // Cut at a character's first byte, so the message stays UTF-8.
  while (most > 0 && (static_cast<unsigned char>(text[most]) & 0xC0) == 0x80) --most;
  return absl::StrCat(text.substr(0, most), "...");
}

const char* InputKindName(InputKind kind) {
  switch (kind) {
    case InputKind::kParameter:
      return "parameter";
    case InputKind::kBuffer:
      return "buffer";
    case InputKind::kConstant:
      return "constant";
    case InputKind::kUserInput:
      return "user input";
  }
  return "?";
}

absl::StatusOr<DType> DTypeOfScalarType(int64_t code) {
  switch (code) {
    case 1:
      return DType::kUInt8;
    case 2:
      return DType::kInt8;
    case 4:
      return DType::kInt32;
    case 5:
      return DType::kInt64;
    case 6:
      return DType::kFloat16;
    case 7:
      return DType::kFloat32;
    case 8:
      return DType::kFloat64;
    case 12:
      return DType::kBool;
    case 13:
      return DType::kBFloat16;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "scalar type ", code,
          " has no Tessera dtype (there are uint8 1, int8 2, int32 4, int64 5, float16 6, "
          "float32 7, float64 8, bool 12, bfloat16 13)"));
  }
}

absl::StatusOr<ExportedProgram> ParseExportedProgram(const nlohmann::json& model,
                                                     const std::string& what) {
  return ProgramReader(what).Read(model);
}

const char* ResolvedByImport(const std::string& op) {
  if (op == "aten::_assert_tensor_metadata") return "checked at import, then dropped";
  if (op == "aten::to.device") return "runs as aten::to.dtype";
  return nullptr;
}

std::map<std::string, int64_t> UnregisteredOps(const ExportedProgram& program) {
  std::map<std::string, int64_t> out;
  for (const ProgramNode& node : program.nodes) {
    if (!Registered(node.op)) ++out[node.op];
  }
  return out;
}

}  // namespace tessera::import
