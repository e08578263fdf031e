// import::OpenHfCheckpoint and MatchCheckpoint on checkpoints transformers' save_pretrained wrote
// (tests/fixtures/export/<model>_hf/, of another seed than the archive's model; Llama's in three
// shards with an index): the archive's program run on the checkpoint's weights gives that model's
// logits (<model>_hf.io.safetensors), tied weights the checkpoint stores once (GPT-2's and BERT's
// LM heads) taken from the name they share, buffers it does not store from the archive; and
// checkpoints edited to be wrong are refused naming the tensor or file.

#include "import/hf_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/files/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "import/archive_tensors.h"
#include "import/program_plan.h"
#include "import/pt2_archive.h"
#include "import/simulated_run.h"
#include "tests/support/exported_models.h"
#include "tests/support/test_device.h"

namespace tessera::import {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kFixtures = TESSERA_EXPORT_FIXTURES;

std::string Fixture(const std::string& name) { return absl::StrCat(kFixtures, "/", name); }

struct Archive {
  ExportedProgram program;
  std::vector<ArchiveTensor> tensors;
  std::map<std::string, int64_t> entries;
};

Archive ReadArchive(const std::string& model) {
  Pt2Zip zip = Pt2Zip::Open(Fixture(model + ".pt2")).value();
  Archive a;
  a.program = ParseExportedProgram(ReadArchiveModel(zip).value().json, model).value();
  a.tensors = ListArchiveTensors(zip, model).value();
  for (const ArchiveTensor& t : a.tensors) a.entries[t.name] = t.entry;
  return a;
}

class HfCheckpointTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HfCheckpointTest, TheProgramOnTheCheckpointsWeightsGivesItsLogits) {
  const std::string model = GetParam();
  const Archive archive = ReadArchive(model);
  absl::StatusOr<HfCheckpoint> checkpoint = OpenHfCheckpoint(Fixture(model + "_hf"));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  if (model == "llama") {  // three shards
    std::set<std::string> files;
    for (const auto& [name, t] : checkpoint->tensors) files.insert(t.file);
    EXPECT_EQ(files.size(), 3u);
  }
  absl::StatusOr<WeightSources> sources =
      MatchCheckpoint(archive.program, *checkpoint, archive.entries);
  ASSERT_TRUE(sources.ok()) << sources.status();
  const SafetensorsFile io = ReadSafetensorsFile(Fixture(model + "_hf.io.safetensors")).value();
  const SafetensorsFile archive_io =
      ReadSafetensorsFile(Fixture(model + ".io.safetensors")).value();

  Pt2Zip zip = Pt2Zip::Open(Fixture(model + ".pt2")).value();
  std::vector<HostTensor> inputs;
  int from_checkpoint = 0;
  for (size_t i = 0; i < archive.program.inputs.size(); ++i) {
    const ProgramInput& in = archive.program.inputs[i];
    if (in.kind == InputKind::kUserInput) {
      inputs.push_back(io.tensors.at(in.name).Clone());
    } else if (!sources->checkpoint_names[i].empty()) {
      ++from_checkpoint;
      absl::StatusOr<HostTensor> t =
          ReadCheckpointTensor(checkpoint->tensors.at(sources->checkpoint_names[i]));
      ASSERT_TRUE(t.ok()) << t.status();
      inputs.push_back(*std::move(t));
    } else {
      EXPECT_NE(in.kind, InputKind::kParameter) << in.target;
      for (const ArchiveTensor& t : archive.tensors) {
        if (t.name == in.target) inputs.push_back(ReadArchiveTensor(zip, t).value());
      }
    }
  }
  ASSERT_EQ(inputs.size(), archive.program.inputs.size());
  EXPECT_GT(from_checkpoint, 10);
  if (model == "gpt2") {  // the LM head is the token embedding, stored once
    for (size_t i = 0; i < archive.program.inputs.size(); ++i) {
      if (archive.program.inputs[i].target == "lm_head.weight") {
        EXPECT_EQ(sources->checkpoint_names[i], "transformer.wte.weight");
      }
    }
  }
  std::unique_ptr<kernels::KernelBackend> backend = testing::TestBackendForRank(0).value();
  for (const Shape& shape : {Shape{1}, Shape{2}}) {
    const DeviceMesh mesh = DeviceMesh::Create("cpu", shape).value();
    ops::ShardingCache cache;
    absl::StatusOr<PlannedProgram> planned = PlanExportedProgram(archive.program, mesh, {}, cache);
    ASSERT_TRUE(planned.ok()) << planned.status();
    absl::StatusOr<SimulatedRun> run =
        RunOnSimulatedMesh(*backend, archive.program, *planned, inputs);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_LE(testing::LogitsError(run->outputs[0], io.tensors.at("logits")), 1.0)
        << mesh.ToString();
    // Not the archive's own weights' logits.
    EXPECT_GT(testing::LogitsError(run->outputs[0], archive_io.tensors.at("logits")), 100.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Transformers, HfCheckpointTest,
                         ::testing::Values("llama", "qwen2", "gpt2", "bert"));

// A copy of a fixture checkpoint to edit.
std::string CopyCheckpoint(const std::string& model, const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::copy(Fixture(model + "_hf"), dir);
  return dir;
}

absl::Status Match(const std::string& dir, const Archive& archive) {
  absl::StatusOr<HfCheckpoint> c = OpenHfCheckpoint(dir);
  if (!c.ok()) return c.status();
  return MatchCheckpoint(archive.program, *c, archive.entries).status();
}

TEST(HfCheckpointErrorsTest, MissingExtraAndMisShapedWeightsAreNamed) {
  const Archive archive = ReadArchive("qwen2");
  const std::string dir = CopyCheckpoint("qwen2", "qwen2_edit");
  const std::string file = dir + "/model.safetensors";
  const SafetensorsFile original = ReadSafetensorsFile(file).value();
  auto write = [&](auto edit) {
    SafetensorsFile f;
    for (const auto& [name, t] : original.tensors) f.tensors.emplace(name, t.Clone());
    edit(f);
    ASSERT_TRUE(WriteSafetensorsFile(file, f).ok());
  };

  write([](SafetensorsFile& f) { f.tensors.erase("model.norm.weight"); });
  absl::Status s = Match(dir, archive);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("lacks parameter 'model.norm.weight' (float32[8])"));

  write([](SafetensorsFile& f) {
    f.tensors.emplace("model.layers.0.extra", HostTensor::ZerosOfValidShape(DType::kFloat32, {2}));
  });
  s = Match(dir, archive);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("holds tensor 'model.layers.0.extra' (float32[2]), which no input"));

  write([](SafetensorsFile& f) {
    f.tensors.erase("model.norm.weight");
    f.tensors.emplace("model.norm.weight", HostTensor::ZerosOfValidShape(DType::kFloat32, {9}));
  });
  s = Match(dir, archive);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'model.norm.weight' is float32[9]"),
                                 HasSubstr("parameter 'model.norm.weight' of the program is "
                                           "float32[8]")));

  write([](SafetensorsFile& f) {
    HostTensor& t = f.tensors.at("model.norm.weight");
    t = HostTensor::ZerosOfValidShape(DType::kFloat64, t.shape());
  });
  s = Match(dir, archive);
  EXPECT_THAT(s.message(), HasSubstr("is float64[8] but"));

  std::filesystem::remove(file);
  s = Match(dir, archive);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("neither model.safetensors nor"));
  std::filesystem::remove(dir + "/config.json");
  EXPECT_EQ(Match(dir, archive).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Match(dir + "/nowhere", archive).code(), absl::StatusCode::kNotFound);
}

TEST(HfCheckpointErrorsTest, ABrokenIndexIsRefusedNamingTheShard) {
  const Archive archive = ReadArchive("llama");
  const std::string dir = CopyCheckpoint("llama", "llama_index");
  const std::string index = dir + "/model.safetensors.index.json";
  nlohmann::json j;
  {
    std::ifstream in(index);
    j = nlohmann::json::parse(in);
  }
  nlohmann::json wrong = j;
  wrong["weight_map"]["model.norm.weight"] = "model-00009-of-00003.safetensors";
  std::ofstream(index) << wrong.dump();
  absl::Status s = Match(dir, archive);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("model-00009-of-00003.safetensors"), HasSubstr("missing")));

  wrong = j;
  wrong["weight_map"]["model.norm.weight"] = "model-00001-of-00003.safetensors";
  std::ofstream(index) << wrong.dump();
  s = Match(dir, archive);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("puts tensor 'model.norm.weight' in "
                                     "model-00001-of-00003.safetensors, which lacks it"));

  wrong = j;
  wrong["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
  std::ofstream(index) << wrong.dump();
  EXPECT_THAT(Match(dir, archive).message(), HasSubstr("not a file in"));

  std::ofstream(index) << "{";
  s = Match(dir, archive);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("model.safetensors.index.json: "));
  std::ofstream(index) << "[1]";
  EXPECT_THAT(Match(dir, archive).message(), HasSubstr("is not a JSON object"));
}

TEST(HfCheckpointErrorsTest, APlanFromTheConfigOrSayWhyNot) {
  const std::string dir = CopyCheckpoint("llama", "llama_plan");
  absl::StatusOr<HfCheckpoint> c = OpenHfCheckpoint(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::Status s = HfPlanOf(*c, "model", 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("model_type 'llama'"), HasSubstr("carries no base_model_tp_plan")));
  c->config["base_model_tp_plan"] = {{"layers.*.mlp.up_proj", "colwise"}};
  absl::StatusOr<ProgramPlan> plan = HfPlanOf(*c, "model", 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->styles.size(), 1u);
  EXPECT_EQ(plan->styles[0].first, "model.layers.*.mlp.up_proj");
  // As text, for a load; the prefix from the config's model_type.
  absl::StatusOr<std::string> text = HfTpPlanText(*c);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, R"({"layers.*.mlp.up_proj":"colwise"})");
  EXPECT_EQ(BaseModelPrefix(*c), "model");
  c->config["model_type"] = "gpt2";
  EXPECT_EQ(BaseModelPrefix(*c), "transformer");
  c->config["model_type"] = "no-such-model";
  EXPECT_EQ(BaseModelPrefix(*c), "");
  c->config["base_model_tp_plan"] = {1, 2};
  EXPECT_THAT(HfTpPlanText(*c).status().message(), HasSubstr("not an object"));
  c->config.erase("base_model_tp_plan");
  EXPECT_THAT(HfTpPlanText(*c).status().message(), HasSubstr("carries no base_model_tp_plan"));
}

}  // namespace
}  // namespace tessera::import
