// What the tests of models from PyTorch share: the fixtures of tests/fixtures/export (torch.export
// archives of tiny transformers models, their weights and logits, written by make_pt2.py), each
// program input's value as the archive stores it, and the distance of logits from
// transformers' in units of torch's float32 tolerance.
#ifndef TESSERA_TESTS_SUPPORT_EXPORTED_MODELS_H_
#define TESSERA_TESTS_SUPPORT_EXPORTED_MODELS_H_

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/files/safetensors.h"
#include "core/host_tensor.h"
#include "gtest/gtest.h"
#include "import/archive_tensors.h"
#include "import/exported_program.h"
#include "import/pt2_zip.h"

namespace tessera::testing {

// The largest |got - want| / (1e-5 + 1e-4 |want|) over the float32 elements: at most 1 is within
// rtol 1e-4, atol 1e-5 (the tolerance the peer tests take against transformers); 1e30 where the
// shapes or dtypes differ or one holds a NaN the other does not.
inline double LogitsError(const HostTensor& got, const HostTensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  EXPECT_EQ(got.dtype(), DType::kFloat32);
  if (got.shape() != want.shape() || got.dtype() != DType::kFloat32 ||
      want.dtype() != DType::kFloat32) {
    return 1e30;
  }
  double worst = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double w = want.data_as<float>()[i];
    const double g = got.data_as<float>()[i];
    if (std::isnan(g) != std::isnan(w)) return 1e30;
    if (!std::isnan(w)) worst = std::max(worst, std::abs(g - w) / (1e-5 + 1e-4 * std::abs(w)));
  }
  return worst;
}

// Each input's full value of `program` (read from the archive at `archive_path`, folder `folder`):
// parameters, buffers and constants as the archive stores them, user inputs from `io` by name.
inline std::vector<HostTensor> ArchiveProgramInputs(const std::string& archive_path,
                                                    const std::string& folder,
                                                    const import::ExportedProgram& program,
                                                    const SafetensorsFile& io) {
  std::vector<HostTensor> out;
  absl::StatusOr<import::Pt2Zip> zip = import::Pt2Zip::Open(archive_path);
  EXPECT_TRUE(zip.ok()) << zip.status();
  if (!zip.ok()) return out;
  absl::StatusOr<std::vector<import::ArchiveTensor>> listed =
      import::ListArchiveTensors(*zip, folder);
  EXPECT_TRUE(listed.ok()) << listed.status();
  if (!listed.ok()) return out;
  std::map<std::string, const import::ArchiveTensor*> tensors;
  for (const import::ArchiveTensor& t : *listed) tensors[t.name] = &t;
  for (const import::ProgramInput& in : program.inputs) {
    if (in.kind == import::InputKind::kUserInput) {
      auto it = io.tensors.find(in.name);
      EXPECT_NE(it, io.tensors.end()) << "no input " << in.name;
      if (it != io.tensors.end()) out.push_back(it->second.Clone());
      continue;
    }
    auto it = tensors.find(in.target);
    EXPECT_NE(it, tensors.end()) << archive_path << " stores no " << in.target;
    if (it == tensors.end()) continue;
    absl::StatusOr<HostTensor> t = import::ReadArchiveTensor(*zip, *it->second);
    EXPECT_TRUE(t.ok()) << t.status();
    if (t.ok()) out.push_back(*std::move(t));
  }
  EXPECT_EQ(out.size(), program.inputs.size());
  return out;
}

// A torchtitan-style parallelize_module plan on the FQNs of fixture model `model` (llama, qwen2,
// gpt2, bert): attention and MLP projections colwise then rowwise, the LM head colwise with its
// output gathered; Llama's and Qwen2's embedding vocab-parallel and input norms sequence-parallel.
inline std::string TorchStylePlan(const std::string& model) {
  if (model == "llama" || model == "qwen2") {
    return R"json({"plan": {
      "model.embed_tokens": {"style": "RowwiseParallel", "input_layouts": "Replicate()"},
      "model.layers.*.input_layernorm": "SequenceParallel",
      "model.layers.*.self_attn.q_proj": "ColwiseParallel",
      "model.layers.*.self_attn.k_proj": "ColwiseParallel",
      "model.layers.*.self_attn.v_proj": "ColwiseParallel",
      "model.layers.*.self_attn.o_proj": "RowwiseParallel",
      "model.layers.*.mlp.gate_proj": "ColwiseParallel",
      "model.layers.*.mlp.up_proj": "ColwiseParallel",
      "model.layers.*.mlp.down_proj": "RowwiseParallel",
      "lm_head": {"style": "ColwiseParallel", "output_layouts": "Replicate()"}}})json";
  }
  if (model == "gpt2") {
    return R"json({"plan": {
      "transformer.h.*.attn.c_proj": "RowwiseParallel",
      "transformer.h.*.mlp.c_fc": "ColwiseParallel",
      "transformer.h.*.mlp.c_proj": "RowwiseParallel",
      "lm_head": {"style": "ColwiseParallel", "output_layouts": "Replicate()"}}})json";
  }
  return R"json({"plan": {
    "bert.encoder.layer.*.attention.self.query": "ColwiseParallel",
    "bert.encoder.layer.*.attention.self.key": "ColwiseParallel",
    "bert.encoder.layer.*.attention.self.value": "ColwiseParallel",
    "bert.encoder.layer.*.attention.output.dense": "RowwiseParallel",
    "bert.encoder.layer.*.intermediate.dense": "ColwiseParallel",
    "bert.encoder.layer.*.output.dense": "RowwiseParallel",
    "cls.predictions.decoder": {"style": "ColwiseParallel", "output_layouts": "Replicate()"}}})json";
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_SUPPORT_EXPORTED_MODELS_H_
