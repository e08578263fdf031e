#include "import/hf_checkpoint.h"

#include <filesystem>
#include <initializer_list>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/files/file_bytes.h"
#include "core/json.h"
#include "core/shape.h"
#include "core/status_macros.h"

namespace tessera::import {
namespace {

using nlohmann::json;

// The most bytes of config.json and of the index that are read (each is a few KB).
constexpr uint64_t kMaxJsonBytes = uint64_t{16} << 20;

absl::StatusOr<json> ReadJsonFile(const std::string& path) {
  ASSIGN_OR_RETURN(const uint64_t size, FileSize(path));
  if (size > kMaxJsonBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is ", size, " bytes; at most ", kMaxJsonBytes, " are read"));
  }
  ASSIGN_OR_RETURN(const std::string text, ReadFileRange(path, 0, static_cast<size_t>(size)));
  absl::StatusOr<json> j = ParseJson(text);
  if (!j.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", j.status().message()));
  if (!j->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a JSON object"));
  }
  return *std::move(j);
}

// Adds every tensor of the safetensors file at `path` (those `wanted` names only, when given).
absl::Status AddFile(const std::string& path, const std::set<std::string>* wanted,
                     std::map<std::string, CheckpointTensor>& tensors) {
  ASSIGN_OR_RETURN(SafetensorsHeader header, ReadSafetensorsHeader(path));
  for (SafetensorsEntry& e : header.tensors) {
    if (wanted != nullptr && !wanted->contains(e.name)) continue;
    auto [it, inserted] = tensors.emplace(e.name, CheckpointTensor{});
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", e.name, "' is in both ", it->second.file, " and ", path));
    }
    it->second = CheckpointTensor{path, std::move(e), header.data_offset};
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HfCheckpoint> OpenHfCheckpoint(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, " is not a checkpoint directory"));
  }
  HfCheckpoint out;
  out.dir = dir;
  const std::string config = dir + "/config.json";
  if (!std::filesystem::exists(config, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, " holds no config.json"));
  }
  ASSIGN_OR_RETURN(out.config, ReadJsonFile(config));
  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  if (std::filesystem::exists(index, ec)) {
    ASSIGN_OR_RETURN(const json j, ReadJsonFile(index));
    if (!j.contains("weight_map") || !j["weight_map"].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(index, " has no weight_map object"));
    }
    // Shard file -> the tensors the index puts there.
    std::map<std::string, std::set<std::string>> shards;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(index, ": tensor '", name, "' maps to ",
                                                       file.dump(), ", not a file in ", dir));
      }
      shards[file.get<std::string>()].insert(name);
    }
    for (const auto& [file, names] : shards) {
      const std::string path = absl::StrCat(dir, "/", file);
      if (!std::filesystem::exists(path, ec)) {
        return absl::InvalidArgumentError(absl::StrCat(index, " names ", file, " (for '",
                                                       *names.begin(), "'), which is missing"));
      }
      RETURN_IF_ERROR(AddFile(path, &names, out.tensors));
      for (const std::string& name : names) {
        auto it = out.tensors.find(name);
        if (it == out.tensors.end() || it->second.file != path) {
          return absl::InvalidArgumentError(
              absl::StrCat(index, " puts tensor '", name, "' in ", file, ", which lacks it"));
        }
      }
    }
  } else if (std::filesystem::exists(single, ec)) {
    RETURN_IF_ERROR(AddFile(single, nullptr, out.tensors));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, " holds neither model.safetensors nor model.safetensors.index.json"));
  }
  return out;
}

absl::StatusOr<HostTensor> ReadCheckpointTensor(const CheckpointTensor& tensor) {
  const SafetensorsEntry& e = tensor.entry;
  ASSIGN_OR_RETURN(const std::string bytes, ReadFileRange(tensor.file, tensor.data_offset + e.begin,
                                                          static_cast<size_t>(e.end - e.begin)));
  return HostTensor::FromBytes(
      e.dtype, e.shape,
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
}

namespace {

// config.json's base_model_tp_plan; INVALID_ARGUMENT saying so where it has none.
absl::StatusOr<const json*> BaseModelTpPlan(const HfCheckpoint& checkpoint) {
  const json& c = checkpoint.config;
  if (!c.contains("base_model_tp_plan") || c["base_model_tp_plan"].is_null()) {
    const std::string type =
        c.contains("model_type") && c["model_type"].is_string() ? c["model_type"] : "?";
    return absl::InvalidArgumentError(absl::StrCat(
        checkpoint.dir, "/config.json (model_type '", type,
        "') carries no base_model_tp_plan (transformers keeps a model's plan in its class): give "
        "the plan as a file, such as json.dump(model.tp_plan, f)"));
  }
  return &c["base_model_tp_plan"];
}

}  // namespace

absl::StatusOr<ProgramPlan> HfPlanOf(const HfCheckpoint& checkpoint, const std::string& prefix,
                                     int tp_mesh_dim) {
  ASSIGN_OR_RETURN(const json* plan, BaseModelTpPlan(checkpoint));
  return ParseHfTpPlan(*plan, prefix, tp_mesh_dim);
}

absl::StatusOr<std::string> HfTpPlanText(const HfCheckpoint& checkpoint) {
  ASSIGN_OR_RETURN(const json* plan, BaseModelTpPlan(checkpoint));
  if (!plan->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        checkpoint.dir, "/config.json: base_model_tp_plan is ", Shown(*plan), ", not an object"));
  }
  return plan->dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string BaseModelPrefix(const HfCheckpoint& checkpoint) {
  const json& c = checkpoint.config;
  if (!c.contains("model_type") || !c["model_type"].is_string()) return "";
  const std::string type = c["model_type"];
  for (const auto& [t, prefix] :
       std::initializer_list<std::pair<const char*, const char*>>{{"llama", "model"},
                                                                  {"qwen2", "model"},
                                                                  {"qwen3", "model"},
                                                                  {"mistral", "model"},
                                                                  {"mixtral", "model"},
                                                                  {"gemma", "model"},
                                                                  {"gemma2", "model"},
                                                                  {"phi3", "model"},
                                                                  {"gpt2", "transformer"},
                                                                  {"bert", "bert"}}) {
    if (type == t) return prefix;
  }
  return "";
}

absl::StatusOr<WeightSources> MatchCheckpoint(
    const ExportedProgram& program, const HfCheckpoint& checkpoint,
    const std::map<std::string, int64_t>& archive_entries) {
  WeightSources out;
  out.checkpoint_names.assign(program.inputs.size(), "");
  std::set<std::string> taken;
  // Archive entry -> the inputs stored there (a tie shares one).
  std::map<int64_t, std::vector<std::string>> sharing;
  for (const auto& [name, entry] : archive_entries) sharing[entry].push_back(name);
  for (size_t i = 0; i < program.inputs.size(); ++i) {
    const ProgramInput& in = program.inputs[i];
    if (in.kind == InputKind::kUserInput) continue;
    std::string source;
    if (checkpoint.tensors.contains(in.target)) {
      source = in.target;
    } else if (auto e = archive_entries.find(in.target); e != archive_entries.end()) {
      for (const std::string& tied : sharing[e->second]) {
        if (tied != in.target && checkpoint.tensors.contains(tied)) source = tied;
      }
    }
    if (source.empty()) {
      if (in.kind == InputKind::kParameter) {
        return absl::InvalidArgumentError(absl::StrCat(
            checkpoint.dir, " lacks parameter '", in.target, "' (",
            MetaText(program.value_metas[i].shape, program.value_metas[i].dtype), ")"));
      }
      continue;  // a buffer or constant the checkpoint does not store: the archive's
    }
    const SafetensorsEntry& e = checkpoint.tensors.at(source).entry;
    const ops::TensorMeta& want = program.value_metas[i];
    if (e.shape != want.shape || e.dtype != want.dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat(checkpoint.dir, ": tensor '", source, "' is ", MetaText(e.shape, e.dtype),
                       " but ", InputKindName(in.kind), " '", in.target, "' of the program is ",
                       MetaText(want.shape, want.dtype)));
    }
    out.checkpoint_names[i] = source;
    taken.insert(source);
  }
  for (const auto& [name, t] : checkpoint.tensors) {
    if (!taken.contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat(checkpoint.dir, " holds tensor '", name, "' (",
                                                     MetaText(t.entry.shape, t.entry.dtype),
                                                     "), which no input of the program takes"));
    }
  }
  return out;
}

}  // namespace tessera::import
