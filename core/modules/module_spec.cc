#include "core/modules/module_spec.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/json.h"
#include "core/names.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr ModuleType kAllModuleTypes[] = {
    ModuleType::kLinear,    ModuleType::kEmbedding,  ModuleType::kLayerNorm,  ModuleType::kRMSNorm,
    ModuleType::kReLU,      ModuleType::kGELU,       ModuleType::kSiLU,       ModuleType::kDropout,
    ModuleType::kAttention, ModuleType::kSequential, ModuleType::kModuleList, ModuleType::kModule,
};

// torch.nn.RMSNorm's eps=None: the input dtype's epsilon (float32 here).
constexpr double kRmsNormDefaultEps = std::numeric_limits<float>::epsilon();

// The names Attention gives its projections, in forward order.
constexpr absl::string_view kAttentionProjections[] = {"q", "k", "v", "o"};

// The JSON value as text for a message, cut to 200 bytes with its full length said; never throws
// (parsed text is valid UTF-8).
std::string ValueText(const json& value) {
  std::string text =
      value.dump(/*indent=*/-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
  constexpr size_t kShown = 200;
  if (text.size() <= kShown) return text;
  const size_t size = text.size();
  size_t keep = kShown;
  while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;
  text.resize(keep);
  return absl::StrCat(text, "... (", size, " bytes)");
}

// "key" at the root, "children[1].key" below it.
std::string JoinPath(absl::string_view prefix, absl::string_view key) {
  return prefix.empty() ? std::string(key) : absl::StrCat(prefix, ".", key);
}

// INVALID_ARGUMENT naming the path and value.
absl::Status BadValue(absl::string_view path, const json& value, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("module spec: ", path, " = ", ValueText(value), ": ", why));
}

// "the root module" or "the module at children[0]", for messages about a whole module.
std::string ModuleAt(absl::string_view path) {
  return path.empty() ? std::string("the root module") : absl::StrCat("the module at ", path);
}

bool IsContainer(ModuleType type) {
  return type == ModuleType::kSequential || type == ModuleType::kModuleList ||
         type == ModuleType::kModule;
}

// The argument keys a module of `type` takes (besides type, name and children), in the order the
// spec writer puts them.
std::vector<absl::string_view> ArgumentKeys(ModuleType type) {
  switch (type) {
    case ModuleType::kLinear:
      return {"in_features", "out_features", "bias"};
    case ModuleType::kEmbedding:
      return {"num_embeddings", "embedding_dim"};
    case ModuleType::kLayerNorm:
    case ModuleType::kRMSNorm:
      return {"normalized_shape", "eps", "elementwise_affine"};
    case ModuleType::kGELU:
      return {"approximate"};
    case ModuleType::kDropout:
      return {"p"};
    case ModuleType::kAttention:
      return {"dim", "n_heads", "causal", "bias"};
    case ModuleType::kModule:
      return {"residual"};
    case ModuleType::kReLU:
    case ModuleType::kSiLU:
    case ModuleType::kSequential:
    case ModuleType::kModuleList:
      return {};
  }
  return {};
}

// The sizes a module of `type` must be given.
std::vector<absl::string_view> RequiredSizes(ModuleType type) {
  switch (type) {
    case ModuleType::kLinear:
      return {"in_features", "out_features"};
    case ModuleType::kEmbedding:
      return {"num_embeddings", "embedding_dim"};
    case ModuleType::kLayerNorm:
    case ModuleType::kRMSNorm:
      return {"normalized_shape"};
    case ModuleType::kAttention:
      return {"dim", "n_heads"};
    default:
      return {};
  }
}

// "Linear takes in_features, out_features, bias" or "ReLU takes no arguments".
std::string TakesText(ModuleType type) {
  const std::vector<absl::string_view> keys = ArgumentKeys(type);
  if (keys.empty()) return absl::StrCat(ModuleTypeName(type), " takes no arguments");
  return absl::StrCat(ModuleTypeName(type), " takes ", absl::StrJoin(keys, ", "));
}

absl::StatusOr<int64_t> ReadPositive(const json& value, absl::string_view path) {
  absl::StatusOr<int64_t> n = JsonInt64(value);
  if (!n.ok()) return BadValue(path, value, n.status().message());
  if (*n <= 0) return BadValue(path, value, "must be a positive integer");
  return *n;
}

absl::StatusOr<bool> ReadBool(const json& value, absl::string_view path) {
  if (!value.is_boolean()) {
    return BadValue(path, value,
                    absl::StrCat("expected true or false, found ", JsonTypeName(value)));
  }
  return value.get<bool>();
}

absl::StatusOr<double> ReadNumber(const json& value, absl::string_view path) {
  if (!value.is_number()) {
    return BadValue(path, value, absl::StrCat("expected a number, found ", JsonTypeName(value)));
  }
  return value.get<double>();
}

// torch's normalized_shape: an int or a one-element list (only the last dim is normalized).
absl::StatusOr<int64_t> ReadNormalizedShape(const json& value, absl::string_view path) {
  if (!value.is_array()) return ReadPositive(value, path);
  if (value.size() != 1) {
    return BadValue(path, value, "only the last dim can be normalized: give one size");
  }
  return ReadPositive(value[0], absl::StrCat(path, "[0]"));
}

// Sets the argument `key` (one of ArgumentKeys(spec.type)) of `spec` from `value`.
absl::Status ReadArgument(absl::string_view key, const json& value, absl::string_view path,
                          ModuleSpec& spec) {
  if (key == "in_features") {
    ASSIGN_OR_RETURN(spec.in_features, ReadPositive(value, path));
  } else if (key == "out_features") {
    ASSIGN_OR_RETURN(spec.out_features, ReadPositive(value, path));
  } else if (key == "num_embeddings") {
    ASSIGN_OR_RETURN(spec.num_embeddings, ReadPositive(value, path));
  } else if (key == "embedding_dim") {
    ASSIGN_OR_RETURN(spec.embedding_dim, ReadPositive(value, path));
  } else if (key == "normalized_shape") {
    ASSIGN_OR_RETURN(spec.normalized_shape, ReadNormalizedShape(value, path));
  } else if (key == "dim") {
    ASSIGN_OR_RETURN(spec.dim, ReadPositive(value, path));
  } else if (key == "n_heads") {
    ASSIGN_OR_RETURN(spec.n_heads, ReadPositive(value, path));
  } else if (key == "bias") {
    ASSIGN_OR_RETURN(spec.bias, ReadBool(value, path));
  } else if (key == "elementwise_affine") {
    ASSIGN_OR_RETURN(spec.elementwise_affine, ReadBool(value, path));
  } else if (key == "causal") {
    ASSIGN_OR_RETURN(spec.causal, ReadBool(value, path));
  } else if (key == "residual") {
    ASSIGN_OR_RETURN(spec.residual, ReadBool(value, path));
  } else if (key == "eps") {
    if (value.is_null() && spec.type == ModuleType::kRMSNorm) {
      spec.eps = kRmsNormDefaultEps;
    } else {
      ASSIGN_OR_RETURN(spec.eps, ReadNumber(value, path));
      if (!(spec.eps >= 0) || !std::isfinite(spec.eps)) {
        return BadValue(path, value, "must be a finite number >= 0");
      }
    }
  } else if (key == "p") {
    ASSIGN_OR_RETURN(spec.p, ReadNumber(value, path));
    if (!(spec.p >= 0 && spec.p <= 1)) return BadValue(path, value, "must be between 0 and 1");
  } else if (key == "approximate") {
    if (!value.is_string() || (value != "none" && value != "tanh")) {
      return BadValue(path, value, "expected \"none\" or \"tanh\"");
    }
    spec.approximate = value.get<std::string>();
  } else {
    return absl::InternalError(absl::StrCat("module spec: no reader for argument ", key));
  }
  return absl::OkStatus();
}

// `key` of `spec` as JSON; `key` is one of ArgumentKeys(spec.type).
ordered_json ArgumentJson(absl::string_view key, const ModuleSpec& spec) {
  if (key == "in_features") return spec.in_features;
  if (key == "out_features") return spec.out_features;
  if (key == "num_embeddings") return spec.num_embeddings;
  if (key == "embedding_dim") return spec.embedding_dim;
  if (key == "normalized_shape") return spec.normalized_shape;
  if (key == "dim") return spec.dim;
  if (key == "n_heads") return spec.n_heads;
  if (key == "bias") return spec.bias;
  if (key == "elementwise_affine") return spec.elementwise_affine;
  if (key == "causal") return spec.causal;
  if (key == "residual") return spec.residual;
  if (key == "eps") return spec.eps;
  if (key == "p") return spec.p;
  if (key == "approximate") return spec.approximate;
  return nullptr;
}

absl::Status ParseModule(const json& object, const std::string& path, bool is_root,
                         ModuleSpec& spec);

// The children of a container module at `path` (the module's path) from the array `children`.
absl::Status ParseChildren(const json& children, const std::string& path, ModuleSpec& spec) {
  const std::string array_path = JoinPath(path, "children");
  if (!children.is_array()) {
    return BadValue(array_path, children,
                    absl::StrCat("expected an array of modules, found ", JsonTypeName(children)));
  }
  const bool numbered = spec.type != ModuleType::kModule;
  std::map<std::string, size_t> index_of_name;
  for (size_t i = 0; i < children.size(); ++i) {
    const json& child = children[i];
    const std::string child_path = absl::StrCat(array_path, "[", i, "]");
    if (!child.is_object()) {
      return BadValue(child_path, child,
                      absl::StrCat("expected a module object, found ", JsonTypeName(child)));
    }
    ModuleSpec& out = spec.children.emplace_back();
    const std::string name_path = JoinPath(child_path, "name");
    const auto name = child.find("name");
    if (name != child.end() && !name->is_string()) {
      return BadValue(name_path, *name,
                      absl::StrCat("expected a string, found ", JsonTypeName(*name)));
    }
    if (numbered) {
      out.name = std::to_string(i);
      if (name != child.end() && name->get<std::string>() != out.name) {
        return BadValue(
            name_path, *name,
            absl::StrCat(ModuleTypeName(spec.type),
                         " children are named by position; this one is \"", out.name, "\""));
      }
    } else {
      if (name == child.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "module spec: ", name_path, " is missing: a Module's children need names"));
      }
      out.name = name->get<std::string>();
      if (!CheckName(NameKind::kChild, out.name).ok()) {
        return BadValue(name_path, *name,
                        "a child name must be 1 to 64 letters, digits, '_' and '-'");
      }
      const auto [it, inserted] = index_of_name.emplace(out.name, i);
      if (!inserted) {
        return BadValue(
            name_path, *name,
            absl::StrCat("duplicate child name (also ", array_path, "[", it->second, "])"));
      }
    }
    RETURN_IF_ERROR(ParseModule(child, child_path, /*is_root=*/false, out));
  }
  return absl::OkStatus();
}

// Attention's q, k, v, o: Linear(dim, dim, bias).
void AddAttentionProjections(ModuleSpec& spec) {
  for (absl::string_view name : kAttentionProjections) {
    ModuleSpec& linear = spec.children.emplace_back();
    linear.type = ModuleType::kLinear;
    linear.name = std::string(name);
    linear.in_features = spec.dim;
    linear.out_features = spec.dim;
    linear.bias = spec.bias;
  }
}

// Reads the module object at `path` ("" for the root) into `spec`; its name is the parent's to
// read.
absl::Status ParseModule(const json& object, const std::string& path, bool is_root,
                         ModuleSpec& spec) {
  if (!object.is_object()) {
    return BadValue(is_root ? "the top level" : path, object,
                    absl::StrCat("expected a module object, found ", JsonTypeName(object)));
  }
  const auto type = object.find("type");
  if (type == object.end()) {
    return absl::InvalidArgumentError(absl::StrCat("module spec: ", JoinPath(path, "type"),
                                                   " is missing: ", ModuleAt(path),
                                                   " needs a \"type\""));
  }
  if (!type->is_string()) {
    return BadValue(JoinPath(path, "type"), *type,
                    absl::StrCat("expected a string, found ", JsonTypeName(*type)));
  }
  absl::StatusOr<ModuleType> parsed_type = ParseModuleType(type->get<std::string>());
  if (!parsed_type.ok()) {
    return BadValue(JoinPath(path, "type"), *type, parsed_type.status().message());
  }
  spec.type = *parsed_type;
  if (spec.type == ModuleType::kRMSNorm) spec.eps = kRmsNormDefaultEps;

  const std::vector<absl::string_view> keys = ArgumentKeys(spec.type);
  for (const auto& [key, value] : object.items()) {
    const std::string key_path = JoinPath(path, key);
    if (key == "type" || (key == "name" && !is_root) || (key == "input" && is_root)) continue;
    if (key == "name") return BadValue(key_path, value, "the root module has no name");
    if (key == "children") {
      if (IsContainer(spec.type)) {
        RETURN_IF_ERROR(ParseChildren(value, path, spec));
      } else if (spec.type == ModuleType::kAttention) {
        return BadValue(key_path, value,
                        "Attention's children q, k, v, o are made from dim and bias; give none");
      } else {
        return BadValue(key_path, value,
                        absl::StrCat(ModuleTypeName(spec.type), " takes no children"));
      }
      continue;
    }
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      return BadValue(key_path, value, absl::StrCat("unknown key; ", TakesText(spec.type)));
    }
    RETURN_IF_ERROR(ReadArgument(key, value, key_path, spec));
  }
  for (absl::string_view size : RequiredSizes(spec.type)) {
    if (!object.contains(size)) {
      return absl::InvalidArgumentError(absl::StrCat("module spec: ", JoinPath(path, size),
                                                     " is missing: ", ModuleTypeName(spec.type),
                                                     " needs a positive ", size));
    }
  }
  if (spec.type == ModuleType::kAttention) {
    if (spec.dim % spec.n_heads != 0) {
      return BadValue(
          JoinPath(path, "n_heads"), *object.find("n_heads"),
          absl::StrCat("dim ", spec.dim, " does not split into ", spec.n_heads, " heads evenly"));
    }
    AddAttentionProjections(spec);
  }
  return absl::OkStatus();
}

absl::StatusOr<ModuleInput> ParseInput(const json& value) {
  if (!value.is_object()) {
    return BadValue(
        "input", value,
        absl::StrCat("expected {\"dtype\": ..., \"shape\": [...]}, found ", JsonTypeName(value)));
  }
  for (const auto& [key, v] : value.items()) {
    if (key != "dtype" && key != "shape") {
      return BadValue(JoinPath("input", key), v, "unknown key (input takes dtype, shape)");
    }
  }
  for (absl::string_view key : {"dtype", "shape"}) {
    if (!value.contains(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("module spec: input.", key, " is missing: input needs dtype and shape"));
    }
  }
  ModuleInput input;
  const json& dtype = value["dtype"];
  if (!dtype.is_string()) {
    return BadValue("input.dtype", dtype,
                    absl::StrCat("expected a dtype name, found ", JsonTypeName(dtype)));
  }
  absl::StatusOr<DType> parsed_dtype = ParseDType(dtype.get<std::string>());
  if (!parsed_dtype.ok()) return BadValue("input.dtype", dtype, parsed_dtype.status().message());
  input.dtype = *parsed_dtype;
  const json& shape = value["shape"];
  if (!shape.is_array() || shape.empty()) {
    return BadValue("input.shape", shape, "expected a non-empty array of sizes");
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    const std::string size_path = absl::StrCat("input.shape[", i, "]");
    absl::StatusOr<int64_t> size = JsonInt64(shape[i]);
    if (!size.ok()) return BadValue(size_path, shape[i], size.status().message());
    if (*size < -1) return BadValue(size_path, shape[i], "a size is >= 0, or -1 where it varies");
    input.shape.push_back(*size);
  }
  return input;
}

// The input of the first module in forward order that fixes one; nullopt if none does
// (activations and Dropout take any shape).
std::optional<ModuleInput> InferInput(const ModuleSpec& spec) {
  switch (spec.type) {
    case ModuleType::kLinear:
      return ModuleInput{DType::kFloat32, {-1, spec.in_features}};
    case ModuleType::kLayerNorm:
    case ModuleType::kRMSNorm:
      return ModuleInput{DType::kFloat32, {-1, spec.normalized_shape}};
    case ModuleType::kEmbedding:
      return ModuleInput{DType::kInt64, {-1, -1}};
    case ModuleType::kAttention:
      return ModuleInput{DType::kFloat32, {-1, -1, spec.dim}};
    case ModuleType::kReLU:
    case ModuleType::kGELU:
    case ModuleType::kSiLU:
    case ModuleType::kDropout:
      return std::nullopt;
    case ModuleType::kSequential:
    case ModuleType::kModuleList:
    case ModuleType::kModule:
      for (const ModuleSpec& child : spec.children) {
        if (std::optional<ModuleInput> input = InferInput(child)) return input;
      }
      return std::nullopt;
  }
  return std::nullopt;
}

ordered_json ModuleToJson(const ModuleSpec& spec, bool is_root) {
  ordered_json out = ordered_json::object();
  out["type"] = std::string(ModuleTypeName(spec.type));
  if (!is_root) out["name"] = spec.name;
  for (absl::string_view key : ArgumentKeys(spec.type)) {
    out[std::string(key)] = ArgumentJson(key, spec);
  }
  if (IsContainer(spec.type)) {
    ordered_json children = ordered_json::array();
    for (const ModuleSpec& child : spec.children) {
      children.push_back(ModuleToJson(child, /*is_root=*/false));
    }
    out["children"] = std::move(children);
  }
  return out;
}

void AddNamedModules(const ModuleSpec& spec, const std::string& fqn,
                     std::vector<std::pair<std::string, const ModuleSpec*>>& out) {
  out.emplace_back(fqn, &spec);
  for (const ModuleSpec& child : spec.children) {
    AddNamedModules(child, fqn.empty() ? child.name : absl::StrCat(fqn, ".", child.name), out);
  }
}

}  // namespace

absl::string_view ModuleTypeName(ModuleType type) {
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
  return "invalid";
}

absl::StatusOr<ModuleType> ParseModuleType(absl::string_view name) {
  for (ModuleType type : kAllModuleTypes) {
    if (ModuleTypeName(type) == name) return type;
  }
  std::vector<absl::string_view> names;
  for (ModuleType type : kAllModuleTypes) names.push_back(ModuleTypeName(type));
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown module type '", name, "'; expected one of ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<ModelSpec> ParseModelSpec(absl::string_view text) {
  absl::StatusOr<json> value = ParseJson(text);
  if (!value.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("module spec: ", value.status().message()));
  }
  ModelSpec spec;
  RETURN_IF_ERROR(ParseModule(*value, "", /*is_root=*/true, spec.root));
  if (const auto input = value->find("input"); input != value->end()) {
    ASSIGN_OR_RETURN(spec.input, ParseInput(*input));
    return spec;
  }
  std::optional<ModuleInput> inferred = InferInput(spec.root);
  if (!inferred.has_value()) {
    return absl::InvalidArgumentError(
        "module spec: no \"input\" given, and no module fixes the input's shape (only "
        "activations and Dropout); give \"input\": {\"dtype\": ..., \"shape\": [...]}");
  }
  spec.input = *std::move(inferred);
  return spec;
}

std::string ModelSpecToJson(const ModelSpec& spec) {
  ordered_json out = ModuleToJson(spec.root, /*is_root=*/true);
  ordered_json input = ordered_json::object();
  input["dtype"] = std::string(DTypeName(spec.input.dtype));
  input["shape"] = spec.input.shape;
  out["input"] = std::move(input);
  return out.dump(/*indent=*/-1, ' ', /*ensure_ascii=*/false,
                  ordered_json::error_handler_t::replace);
}

std::vector<std::pair<std::string, const ModuleSpec*>> NamedModules(const ModuleSpec& root) {
  std::vector<std::pair<std::string, const ModuleSpec*>> out;
  AddNamedModules(root, "", out);
  return out;
}

std::vector<ParameterInfo> OwnParameters(const ModuleSpec& module) {
  switch (module.type) {
    case ModuleType::kLinear:
      if (!module.bias) return {{"weight", {module.out_features, module.in_features}}};
      return {{"weight", {module.out_features, module.in_features}},
              {"bias", {module.out_features}}};
    case ModuleType::kEmbedding:
      return {{"weight", {module.num_embeddings, module.embedding_dim}}};
    case ModuleType::kLayerNorm:
      if (!module.elementwise_affine) return {};
      return {{"weight", {module.normalized_shape}}, {"bias", {module.normalized_shape}}};
    case ModuleType::kRMSNorm:
      if (!module.elementwise_affine) return {};
      return {{"weight", {module.normalized_shape}}};
    default:
      return {};
  }
}

std::vector<ParameterInfo> NamedParameters(const ModuleSpec& root) {
  std::vector<ParameterInfo> out;
  for (const auto& [fqn, module] : NamedModules(root)) {
    for (ParameterInfo& p : OwnParameters(*module)) {
      out.push_back({fqn.empty() ? p.fqn : absl::StrCat(fqn, ".", p.fqn), std::move(p.shape)});
    }
  }
  return out;
}

}  // namespace tessera
