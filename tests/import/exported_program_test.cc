// import::ParseExportedProgram, ListArchiveTensors and PlanExportedProgram on the torch.export
// archives of transformers' Llama, Qwen2, GPT-2 and BERT (tests/fixtures/export/make_pt2.py):
// the program's nodes are torch's (counted as torch listed them), its inputs the signature's
// state_dict names, its stored tensors equal the model's state_dict (<model>.safetensors, saved
// by the same script), and the whole graph plans on meshes of 1 to 4 ranks, replicated and with
// tensor-parallel parameter placements, the registry's meta giving every value the shape and dtype
// torch recorded; run on a simulated mesh (tests/support/simulated_program.h) it gives
// transformers' logits (<model>.io.safetensors). Archives edited to be wrong are refused naming
// the node, value or tensor.

#include "import/exported_program.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/files/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "import/archive_tensors.h"
#include "import/program_plan.h"
#include "import/pt2_archive.h"
#include "import/simulated_run.h"
#include "nlohmann/json.hpp"
#include "tests/import/write_zip.h"
#include "tests/support/exported_models.h"
#include "tests/support/test_device.h"

namespace tessera::import {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kFixtures = TESSERA_EXPORT_FIXTURES;

std::string ArchivePath(const std::string& model) {
  return absl::StrCat(kFixtures, "/", model, ".pt2");
}

absl::StatusOr<ExportedProgram> ReadProgram(const std::string& path) {
  absl::StatusOr<Pt2Zip> zip = Pt2Zip::Open(path);
  if (!zip.ok()) return zip.status();
  absl::StatusOr<ArchiveModel> model = ReadArchiveModel(*zip);
  if (!model.ok()) return model.status();
  return ParseExportedProgram(model->json, path);
}

DeviceMesh Mesh(Shape shape) { return DeviceMesh::Create("cpu", std::move(shape)).value(); }

class ExportedProgramTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExportedProgramTest, NodesAreTorchsAndEveryOpIsRegistered) {
  const std::string model = GetParam();
  absl::StatusOr<ExportedProgram> program = ReadProgram(ArchivePath(model));
  ASSERT_TRUE(program.ok()) << program.status();
  std::ifstream in(absl::StrCat(kFixtures, "/", model, ".ops.json"));
  const nlohmann::json listed = nlohmann::json::parse(in);
  // torch's listing, with the nodes import answers itself moved: _assert_tensor_metadata gone,
  // to.device run as to.dtype.
  std::map<std::string, int64_t> want;
  std::map<std::string, int64_t> resolved;
  for (const auto& [op, count] : listed.items()) {
    if (op == "aten::_assert_tensor_metadata" || op == "aten::to.device") {
      resolved[op] = count.get<int64_t>();
      if (op == "aten::to.device") want["aten::to.dtype"] += count.get<int64_t>();
    } else {
      want[op] += count.get<int64_t>();
    }
  }
  std::map<std::string, int64_t> got;
  int outputs = 0;
  for (const ProgramNode& node : program->nodes) {
    ++got[node.op];
    outputs += static_cast<int>(node.outputs.size());
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(program->resolved, resolved);
  EXPECT_EQ(program->num_values(), static_cast<int>(program->inputs.size()) + outputs);
  EXPECT_THAT(UnregisteredOps(*program), ::testing::IsEmpty());
  ASSERT_EQ(program->outputs.size(), 1u);
  // The logits: [batch 1, 6 tokens, vocab 32].
  EXPECT_EQ(program->value_metas[program->outputs[0]].shape, (Shape{1, 6, 32}));
  // Nodes name the modules they ran in, by PyTorch's FQNs.
  std::set<std::string> modules;
  for (const ProgramNode& node : program->nodes) modules.insert(node.module);
  const std::string linear = model == "llama" || model == "qwen2" ? "model.layers.0.mlp.up_proj"
                             : model == "gpt2"                    ? "transformer.h.0.mlp.c_fc"
                                               : "bert.encoder.layer.0.intermediate.dense";
  EXPECT_TRUE(modules.contains(linear)) << linear;
}

TEST_P(ExportedProgramTest, StoredTensorsAreTheStateDict) {
  const std::string model = GetParam();
  absl::StatusOr<Pt2Zip> zip = Pt2Zip::Open(ArchivePath(model));
  ASSERT_TRUE(zip.ok()) << zip.status();
  absl::StatusOr<ExportedProgram> program = ReadProgram(ArchivePath(model));
  ASSERT_TRUE(program.ok()) << program.status();
  absl::StatusOr<std::vector<ArchiveTensor>> tensors = ListArchiveTensors(*zip, model);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  absl::StatusOr<SafetensorsFile> state =
      ReadSafetensorsFile(absl::StrCat(kFixtures, "/", model, ".safetensors"));
  ASSERT_TRUE(state.ok()) << state.status();

  std::map<std::string, const ArchiveTensor*> by_name;
  for (const ArchiveTensor& t : *tensors) by_name[t.name] = &t;
  std::set<std::string> inputs;
  for (size_t i = 0; i < program->inputs.size(); ++i) {
    const ProgramInput& in = program->inputs[i];
    if (in.kind == InputKind::kUserInput) {
      EXPECT_EQ(in.name, "input_ids");
      continue;
    }
    inputs.insert(in.target);
    ASSERT_TRUE(by_name.contains(in.target)) << in.target;
    const ArchiveTensor& t = *by_name[in.target];
    EXPECT_EQ(t.is_param, in.kind == InputKind::kParameter) << in.target;
    EXPECT_EQ(t.meta.shape, program->value_metas[i].shape) << in.target;
    EXPECT_EQ(t.meta.dtype, program->value_metas[i].dtype) << in.target;
  }
  std::set<std::string> stored;
  for (const ArchiveTensor& t : *tensors) {
    stored.insert(t.name);
    absl::StatusOr<HostTensor> value = ReadArchiveTensor(*zip, t);
    ASSERT_TRUE(value.ok()) << value.status();
    ASSERT_TRUE(state->tensors.contains(t.name)) << t.name;
    EXPECT_TRUE(value->BitEqual(state->tensors.at(t.name))) << t.name;
  }
  EXPECT_EQ(stored, inputs);
  EXPECT_EQ(stored.size(), state->tensors.size());
  // GPT-2's LM head is its token embedding: one stored tensor under both names.
  if (model == "gpt2") {
    EXPECT_EQ(by_name["lm_head.weight"]->entry, by_name["transformer.wte.weight"]->entry);
  }
}

// The FQN of the module a Linear-like parameter belongs to, and how a tensor-parallel plan lays
// its weight out: colwise projections Shard(0), rowwise Shard(1) (GPT-2's Conv1D weights are
// [in, out]: the other way round). Embeddings shard their rows.
std::vector<Placement> TensorParallel(const std::string& model, const std::string& fqn, int rank) {
  auto ends = [&](const char* s) { return absl::EndsWith(fqn, s); };
  const bool conv1d = model == "gpt2";
  const bool colwise = ends("q_proj.weight") || ends("k_proj.weight") || ends("v_proj.weight") ||
                       ends("gate_proj.weight") || ends("up_proj.weight") || ends("query.weight") ||
                       ends("key.weight") || ends("value.weight") ||
                       ends("intermediate.dense.weight") || ends("c_attn.weight") ||
                       ends("c_fc.weight");
  const bool rowwise =
      ends("o_proj.weight") || ends("down_proj.weight") || ends("attention.output.dense.weight") ||
      (absl::StrContains(fqn, "layer.0.output.dense.weight")) || ends("c_proj.weight");
  const bool embedding =
      ends("embed_tokens.weight") || ends("wte.weight") || ends("word_embeddings.weight");
  if (rank == 2 && colwise) return {Placement::Shard(conv1d ? 1 : 0)};
  if (rank == 2 && rowwise) return {Placement::Shard(conv1d ? 0 : 1)};
  if (rank == 2 && embedding) return {Placement::Shard(0)};
  return {};
}

TEST_P(ExportedProgramTest, PlansOnEveryMeshWithTorchsShapes) {
  const std::string model = GetParam();
  absl::StatusOr<ExportedProgram> program = ReadProgram(ArchivePath(model));
  ASSERT_TRUE(program.ok()) << program.status();
  for (const Shape& mesh_shape : {Shape{1}, Shape{2}, Shape{3}, Shape{4}, Shape{2, 2}}) {
    const DeviceMesh mesh = Mesh(mesh_shape);
    ops::ShardingCache cache;
    absl::StatusOr<PlannedProgram> planned = PlanExportedProgram(*program, mesh, {}, cache);
    ASSERT_TRUE(planned.ok()) << mesh.ToString() << ": " << planned.status();
    ASSERT_EQ(planned->values.size(), static_cast<size_t>(program->num_values()));
    ASSERT_EQ(planned->nodes.size(), program->nodes.size());
    for (size_t v = 0; v < planned->values.size(); ++v) {
      EXPECT_EQ(planned->values[v].shape, program->value_metas[v].shape);
    }
    if (mesh.ndim() != 1) continue;
    // Tensor-parallel parameter placements: propagation carries the shards on, and every value
    // keeps torch's shape.
    std::vector<std::vector<Placement>> placements(program->inputs.size());
    int sharded = 0;
    for (size_t i = 0; i < program->inputs.size(); ++i) {
      placements[i] = TensorParallel(model, program->inputs[i].target,
                                     static_cast<int>(program->value_metas[i].shape.size()));
      sharded += placements[i].empty() ? 0 : 1;
    }
    EXPECT_GE(sharded, 5) << model;
    ops::ShardingCache tp_cache;
    planned = PlanExportedProgram(*program, mesh, placements, tp_cache);
    ASSERT_TRUE(planned.ok()) << mesh.ToString() << ": " << planned.status();
    int sharded_values = 0;
    for (size_t v = program->inputs.size(); v < planned->values.size(); ++v) {
      EXPECT_EQ(planned->values[v].shape, program->value_metas[v].shape);
      for (const Placement& p : planned->values[v].placements) {
        sharded_values += p.is_shard() ? 1 : 0;
      }
    }
    if (mesh.size() > 1) {
      EXPECT_GT(sharded_values, 0) << mesh.ToString();
    }
  }
}

// The program run on a simulated mesh gives transformers' logits: on one rank, replicated on
// several (each rank computes the whole), and with tensor-parallel parameter placements, where
// propagation shards the activations and reduces the rowwise products.
TEST_P(ExportedProgramTest, RunsAsTransformersOnEveryMesh) {
  const std::string model = GetParam();
  absl::StatusOr<ExportedProgram> program = ReadProgram(ArchivePath(model));
  ASSERT_TRUE(program.ok()) << program.status();
  absl::StatusOr<SafetensorsFile> io =
      ReadSafetensorsFile(absl::StrCat(kFixtures, "/", model, ".io.safetensors"));
  ASSERT_TRUE(io.ok()) << io.status();
  const std::vector<HostTensor> inputs =
      testing::ArchiveProgramInputs(ArchivePath(model), model, *program, *io);
  ASSERT_EQ(inputs.size(), program->inputs.size());
  const HostTensor& want = io->tensors.at("logits");
  std::unique_ptr<kernels::KernelBackend> backend = testing::TestBackendForRank(0).value();
  for (const Shape& mesh_shape : {Shape{1}, Shape{2}, Shape{3}, Shape{4}, Shape{2, 2}}) {
    for (const bool tp : {false, true}) {
      if (tp && mesh_shape.size() != 1) continue;
      const DeviceMesh mesh = Mesh(mesh_shape);
      std::vector<std::vector<Placement>> placements(program->inputs.size());
      if (tp) {
        for (size_t i = 0; i < program->inputs.size(); ++i) {
          placements[i] = TensorParallel(model, program->inputs[i].target,
                                         static_cast<int>(program->value_metas[i].shape.size()));
        }
      }
      const std::string what = absl::StrCat(model, " on ", mesh.ToString(), tp ? ", tp" : "");
      ops::ShardingCache cache;
      absl::StatusOr<PlannedProgram> planned =
          PlanExportedProgram(*program, mesh, placements, cache);
      ASSERT_TRUE(planned.ok()) << what << ": " << planned.status();
      absl::StatusOr<SimulatedRun> run = RunOnSimulatedMesh(*backend, *program, *planned, inputs);
      ASSERT_TRUE(run.ok()) << what << ": " << run.status();
      ASSERT_EQ(run->outputs.size(), 1u);
      const HostTensor& got = run->outputs[0];
      ASSERT_EQ(got.shape(), want.shape()) << what;
      ASSERT_EQ(got.dtype(), DType::kFloat32) << what;
      const double worst = testing::LogitsError(got, want);
      EXPECT_LE(worst, 1.0) << what << ": the logits differ from transformers' by " << worst
                            << " of the tolerance";
      if (mesh.size() == 1) {
        EXPECT_EQ(run->bytes_moved, 0) << what;
      }
      if (tp && mesh.size() > 1) {
        EXPECT_GT(run->bytes_moved, 0) << what;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transformers, ExportedProgramTest,
                         ::testing::Values("llama", "qwen2", "gpt2", "bert"));

// The llama archive's model JSON, to edit.
nlohmann::json LlamaJson() {
  absl::StatusOr<Pt2Zip> zip = Pt2Zip::Open(ArchivePath("llama"));
  EXPECT_TRUE(zip.ok()) << zip.status();
  absl::StatusOr<ArchiveModel> model = ReadArchiveModel(*zip);
  EXPECT_TRUE(model.ok()) << model.status();
  return model->json;
}

nlohmann::json& Nodes(nlohmann::json& j) { return j["graph_module"]["graph"]["nodes"]; }

// The first node calling `target`.
nlohmann::json& NodeOf(nlohmann::json& j, const std::string& target) {
  for (nlohmann::json& n : Nodes(j)) {
    if (n["target"] == target) return n;
  }
  ADD_FAILURE() << "no node calls " << target;
  return Nodes(j)[0];
}

absl::Status PlanJson(const nlohmann::json& j) {
  absl::StatusOr<ExportedProgram> program = ParseExportedProgram(j, "llama.pt2");
  if (!program.ok()) return program.status();
  ops::ShardingCache cache;
  return PlanExportedProgram(*program, Mesh({2}), {}, cache).status();
}

TEST(ExportedProgramErrorsTest, AGraphWhoseShapesDisagreeIsRefusedNamingTheNode) {
  nlohmann::json j = LlamaJson();
  const std::string name = NodeOf(j, "torch.ops.aten.linear.default")["name"];
  j["graph_module"]["graph"]["tensor_values"][name]["sizes"][2]["as_int"] = 9;
  const absl::Status s = PlanJson(j);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr(absl::StrCat("'", name, "' (aten::linear)")),
                                 HasSubstr("float32[1, 6, 8] by the registry's meta"),
                                 HasSubstr("archive records float32[1, 6, 9]"),
                                 HasSubstr("in model.layers.0.self_attn.q_proj")));
}

TEST(ExportedProgramErrorsTest, AnOpTheRegistryLacksIsListedWithItsCount) {
  nlohmann::json j = LlamaJson();
  int renamed = 0;
  for (nlohmann::json& n : Nodes(j)) {
    if (n["target"] == "torch.ops.aten.rsqrt.default") {
      n["target"] = "torch.ops.aten.frobnicate.default";
      ++renamed;
    }
  }
  ASSERT_GT(renamed, 1);
  const absl::Status s = PlanJson(j);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("aten::frobnicate (", renamed, " nodes)")));
}

TEST(ExportedProgramErrorsTest, MalformedGraphsAreRefusedNamingWhatIsWrong) {
  struct Case {
    const char* what;
    void (*edit)(nlohmann::json&);
    absl::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"a value read before it is written",
       [](nlohmann::json& j) {
         NodeOf(j, "torch.ops.aten.rsqrt.default")["inputs"][0]["arg"]["as_tensor"]["name"] =
             "nowhere";
       },
       absl::StatusCode::kInvalidArgument, "value 'nowhere' is read before anything writes it"},
      {"a value written twice",
       [](nlohmann::json& j) {
         Nodes(j)[1]["outputs"][0]["as_tensor"]["name"] = Nodes(j)[0]["name"];
       },
       absl::StatusCode::kInvalidArgument, "is written twice"},
      {"a symbolic size",
       [](nlohmann::json& j) {
         j["graph_module"]["graph"]["tensor_values"]["input_ids"]["sizes"][1] = {{"as_expr", "s0"}};
       },
       absl::StatusCode::kUnimplemented, "static shapes"},
      {"a dtype Tessera lacks",
       [](nlohmann::json& j) {
         j["graph_module"]["graph"]["tensor_values"]["input_ids"]["dtype"] = 10;
       },
       absl::StatusCode::kInvalidArgument, "scalar type 10"},
      {"an assertion the graph breaks",
       [](nlohmann::json& j) {
         for (nlohmann::json& a :
              NodeOf(j, "torch.ops.aten._assert_tensor_metadata.default")["inputs"]) {
           if (a["name"] == "dtype") a["arg"]["as_scalar_type"] = 7;
         }
       },
       absl::StatusCode::kInvalidArgument, "asserts dtype float32 of a bool value"},
      {"an assertion the graph breaks, its dtype given positionally",
       [](nlohmann::json& j) {
         for (nlohmann::json& a :
              NodeOf(j, "torch.ops.aten._assert_tensor_metadata.default")["inputs"]) {
           if (a["name"] == "dtype") {
             a["arg"]["as_scalar_type"] = 7;
             a["kind"] = 1;
           }
         }
       },
       absl::StatusCode::kInvalidArgument, "asserts dtype float32 of a bool value"},
      {"an integer past int64",
       [](nlohmann::json& j) {
         j["graph_module"]["graph"]["tensor_values"]["input_ids"]["sizes"][1]["as_int"] =
             uint64_t{18446744073709551615u};
       },
       absl::StatusCode::kInvalidArgument, "18446744073709551615"},
      {"an unknown argument kind",
       [](nlohmann::json& j) {
         NodeOf(j, "torch.ops.aten.rsqrt.default")["inputs"][0]["arg"] = {{"as_graph", 1}};
       },
       absl::StatusCode::kUnimplemented, "an argument of kind as_graph"},
      {"a buffer mutation",
       [](nlohmann::json& j) {
         j["graph_module"]["signature"]["output_specs"][0] = {{"buffer_mutation", {}}};
       },
       absl::StatusCode::kUnimplemented, "output 0 is buffer_mutation"},
      {"no tensor_values",
       [](nlohmann::json& j) { j["graph_module"]["graph"].erase("tensor_values"); },
       absl::StatusCode::kInvalidArgument, "no tensor_values"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = LlamaJson();
    c.edit(j);
    const absl::Status s = PlanJson(j);
    EXPECT_EQ(s.code(), c.code) << c.what << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.what;
    EXPECT_THAT(s.message(), HasSubstr("llama.pt2")) << c.what;
  }
}

// torch writes an infinite or NaN float as a string; a module path may hold commas in brackets.
TEST(ExportedProgramTest, ReadsTorchsSpellings) {
  nlohmann::json j = LlamaJson();
  for (nlohmann::json& n : Nodes(j)) {
    for (nlohmann::json& a : n["inputs"]) {
      if (a["arg"].contains("as_float") && a["arg"]["as_float"] == 1e-06) {
        a["arg"]["as_float"] = "-Infinity";
      }
    }
  }
  Nodes(j)[0]["metadata"]["nn_module_stack"] =
      "L__self__,,M;L__self___layers_slice,layers.slice(None, 2, None).0,torch.nn.Embedding";
  absl::StatusOr<ExportedProgram> program = ParseExportedProgram(j, "llama.pt2");
  ASSERT_TRUE(program.ok()) << program.status();
  int infinite = 0;
  for (const ProgramNode& node : program->nodes) {
    for (const ops::NamedValue& arg : node.args) {
      if (const double* d = std::get_if<double>(&arg.value); d != nullptr && std::isinf(*d)) {
        EXPECT_LT(*d, 0);
        ++infinite;
      }
    }
  }
  EXPECT_GE(infinite, 2);
  EXPECT_EQ(program->nodes[0].module, "layers.slice(None, 2, None).0");
  EXPECT_EQ(program->module_types.at("layers.slice(None, 2, None).0"), "torch.nn.Embedding");
}

// Nesting past 64 levels is refused before anything walks it.
TEST(ExportedProgramErrorsTest, DeepJsonIsRefused) {
  std::string deep = R"({"graph_module": {"graph": {"nodes": [], "x": )";
  for (int i = 0; i < 200; ++i) deep += "[";
  for (int i = 0; i < 200; ++i) deep += "]";
  deep += "}}}";
  const std::string path = ::testing::TempDir() + "/deep.pt2";
  ASSERT_NO_FATAL_FAILURE(WriteZip(path, {{"m/models/model.json", deep}}));
  const absl::Status s = ReadPt2Graph(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("not JSON"), HasSubstr("64")));
}

TEST(ExportedProgramErrorsTest, PlacementsThatDoNotFitNameTheParameter) {
  absl::StatusOr<ExportedProgram> program = ReadProgram(ArchivePath("llama"));
  ASSERT_TRUE(program.ok()) << program.status();
  std::vector<std::vector<Placement>> placements(program->inputs.size());
  placements[1] = {Placement::Shard(2)};  // q_proj.weight is 2-D
  ops::ShardingCache cache;
  const absl::Status s = PlanExportedProgram(*program, Mesh({2}), placements, cache).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("parameter 'model.layers.0.self_attn.q_proj.weight'"));
}

TEST(ArchiveTensorsTest, AStoredTensorOfTheWrongSizeIsRefusedNamingIt) {
  std::map<std::string, std::string> entries;
  ASSERT_NO_FATAL_FAILURE(ReadZip(ArchivePath("llama"), entries));
  nlohmann::json config =
      nlohmann::json::parse(entries.at("llama/data/weights/model_weights_config.json"));
  const std::string file = config["config"]["model.norm.weight"]["path_name"];
  entries.at("llama/data/weights/" + file).resize(12);
  const std::string path = ::testing::TempDir() + "/short_weight.pt2";
  ASSERT_NO_FATAL_FAILURE(WriteZip(path, entries));
  absl::StatusOr<Pt2Zip> zip = Pt2Zip::Open(path);
  ASSERT_TRUE(zip.ok()) << zip.status();
  absl::StatusOr<std::vector<ArchiveTensor>> tensors = ListArchiveTensors(*zip, "llama");
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  for (const ArchiveTensor& t : *tensors) {
    const absl::Status s = ReadArchiveTensor(*zip, t).status();
    if (t.name != "model.norm.weight") {
      EXPECT_TRUE(s.ok()) << s;
      continue;
    }
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("'model.norm.weight'"), HasSubstr("float32[8]"),
                                   HasSubstr("32 bytes"), HasSubstr("holds 12")));
  }

  // A config naming a file the archive lacks, and one stored pickled.
  config["config"]["model.norm.weight"]["path_name"] = "weight_99";
  entries["llama/data/weights/model_weights_config.json"] = config.dump();
  ASSERT_NO_FATAL_FAILURE(WriteZip(path, entries));
  zip = Pt2Zip::Open(path);
  ASSERT_TRUE(zip.ok());
  absl::Status s = ListArchiveTensors(*zip, "llama").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'model.norm.weight'"), HasSubstr("weight_99")));
  config["config"]["model.norm.weight"]["path_name"] = file;
  config["config"]["model.norm.weight"]["use_pickle"] = true;
  entries["llama/data/weights/model_weights_config.json"] = config.dump();
  ASSERT_NO_FATAL_FAILURE(WriteZip(path, entries));
  zip = Pt2Zip::Open(path);
  ASSERT_TRUE(zip.ok());
  s = ListArchiveTensors(*zip, "llama").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'model.norm.weight'"), HasSubstr("pickled")));
}

}  // namespace
}  // namespace tessera::import
