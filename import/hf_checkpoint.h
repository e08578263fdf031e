// A Hugging Face checkpoint directory as save_pretrained writes it: config.json, and the weights
// in model.safetensors or in shards that model.safetensors.index.json maps each tensor to. Only
// headers are read when it opens; each tensor's bytes are read alone, when asked.
#ifndef TESSERA_IMPORT_HF_CHECKPOINT_H_
#define TESSERA_IMPORT_HF_CHECKPOINT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/files/safetensors.h"
#include "core/host_tensor.h"
#include "import/exported_program.h"
#include "import/program_parallel.h"
#include "nlohmann/json.hpp"

namespace tessera::import {

// One tensor of a checkpoint: the file holding it and where its bytes lie there.
struct CheckpointTensor {
  std::string file;  // the path of its safetensors file
  SafetensorsEntry entry;
  uint64_t data_offset = 0;  // where that file's data buffer starts
};

struct HfCheckpoint {
  std::string dir;
  nlohmann::json config;
  std::map<std::string, CheckpointTensor> tensors;  // by state_dict name
};

// Opens the checkpoint in `dir`: NOT_FOUND naming the directory or config.json where they are
// missing; INVALID_ARGUMENT naming the file for a config that is not a JSON object, no
// model.safetensors nor model.safetensors.index.json, an index without a weight_map or naming a
// shard that is missing or does not hold the tensor, a safetensors header that does not read, a
// tensor in two files.
absl::StatusOr<HfCheckpoint> OpenHfCheckpoint(const std::string& dir);

// The value of `tensor` (its bytes only are read).
absl::StatusOr<HostTensor> ReadCheckpointTensor(const CheckpointTensor& tensor);

// The model's own plan, config.json's base_model_tp_plan under the base model's prefix, on mesh
// dim `tp_mesh_dim`: INVALID_ARGUMENT saying so where the config carries none (transformers 5
// keeps it in the model's class: give the plan as a file then).
absl::StatusOr<ProgramPlan> HfPlanOf(const HfCheckpoint& checkpoint, const std::string& prefix,
                                     int tp_mesh_dim);
// The same plan as JSON text (what a load sends as its tp_plan), with HfPlanOf's error.
absl::StatusOr<std::string> HfTpPlanText(const HfCheckpoint& checkpoint);
// The module a config's model_type keeps its base model under, which its base_model_tp_plan is
// relative to, as transformers names it ("model" for llama, qwen2, mistral; "transformer" for
// gpt2; "bert" for bert); "" for a type this table lacks.
std::string BaseModelPrefix(const HfCheckpoint& checkpoint);

// Where each program input's value comes from when a checkpoint gives the weights: a parameter
// or buffer by its state_dict name from the checkpoint, or else from the archive (a tied weight
// the checkpoint stores under the name it shares an archive entry with, a non-persistent buffer,
// a constant); -1 for a user input.
struct WeightSources {
  // Per program input: the checkpoint tensor's name, or "" where the archive gives it.
  std::vector<std::string> checkpoint_names;
};

// Matches the checkpoint to the program's inputs. `archive_entries[name]` is the archive entry of
// each tensor the archive stores (ListArchiveTensors), which tells tied weights apart.
// INVALID_ARGUMENT naming the tensor for one the checkpoint holds that no input takes (extra), a
// parameter neither the checkpoint nor a tie gives (missing), and a shape or dtype other than the
// program's (both named).
absl::StatusOr<WeightSources> MatchCheckpoint(
    const ExportedProgram& program, const HfCheckpoint& checkpoint,
    const std::map<std::string, int64_t>& archive_entries);

}  // namespace tessera::import

#endif  // TESSERA_IMPORT_HF_CHECKPOINT_H_
