// Models from PyTorch on a real local cluster (a coordinator and 4 CPU worker processes): the
// torch.export archives of tests/fixtures/export (Llama, Qwen2, GPT-2 and BERT from transformers,
// written by make_pt2.py) loaded with LoadExported on meshes of 1, 2 and 4 ranks and 2 dp x 2 tp,
// laid out by their own tp_plan, by torchtitan-style parallelize_module plans or not at all, their
// weights from the archive or from the Hugging Face checkpoint beside it: each forward's logits
// against the logits transformers computed when the fixture was made (rtol 1e-4, atol 1e-5), the
// layouts Show reports against the plan, state_dict against the archive's tensors; and malformed
// programs, weights and inputs refused with their codes, leaving nothing behind; and a module that
// comes back whole after its coordinator is killed and restarted.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "core/files/safetensors.h"
#include "grpcpp/grpcpp.h"
#include "import/program_weights.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "tessera/tessera.h"
#include "tessera/v1/module.grpc.pb.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/cluster/module_cluster.h"
#include "tests/support/exported_models.h"
#include "tests/support/status_assertions.h"

namespace tessera {
namespace {

using ::tessera::client::Module;
using ::tessera::client::Session;
using ::tessera::testing::StatusIs;

const std::string kFixtures = TESSERA_EXPORT_FIXTURES;
std::string Fixture(const std::string& name) { return absl::StrCat(kFixtures, "/", name); }

testing::ModuleCluster* shared = nullptr;
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment([] {
  LocalClusterOptions options = testing::TestClusterOptions(4);
  options.memory_budget_bytes = int64_t{256} << 20;
  return new testing::ModuleClusterEnvironment(options,
                                               {{"one", {1}, {"tp"}},
                                                {"two", {2}, {"tp"}},
                                                {"four", {4}, {"tp"}},
                                                {"grid", {2, 2}, {"dp", "tp"}}},
                                               &shared);
}());

Session& S() { return *shared->session; }
const client::Mesh& M(const std::string& name) { return shared->meshes.at(name); }

// A forward's inputs, moved in (HostTensor does not copy).
template <typename... T>
std::vector<HostTensor> Inputs(T... tensors) {
  std::vector<HostTensor> v;
  (v.push_back(std::move(tensors)), ...);
  return v;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// How a case lays its model out.
enum class Plan { kNone, kTpPlan, kTorch };
const char* PlanName(Plan p) {
  return p == Plan::kNone ? "none" : p == Plan::kTpPlan ? "tp_plan" : "torch";
}

client::LoadExportedOptions OptionsFor(const std::string& model, Plan plan, bool checkpoint) {
  client::LoadExportedOptions options;
  if (plan == Plan::kTpPlan) options.tp_plan_json = ReadText(Fixture(model + ".tp_plan.json"));
  if (plan == Plan::kTorch) options.plan_json = testing::TorchStylePlan(model);
  if (checkpoint) options.checkpoint_dir = Fixture(model + "_hf");
  return options;
}

// (model, mesh, plan, weights from the checkpoint)
using Case = std::tuple<std::string, std::string, Plan, bool>;

class ImportedLogitsTest : public ::testing::TestWithParam<Case> {};

TEST_P(ImportedLogitsTest, EqualTransformers) {
  const auto& [model, mesh, plan, checkpoint] = GetParam();
  if (plan == Plan::kTpPlan && model != "llama" && model != "qwen2") {
    GTEST_SKIP() << model << " has no tp_plan in transformers";
  }
  const std::string name =
      absl::StrCat(model, "-", mesh, "-", PlanName(plan), checkpoint ? "-hf" : "");
  absl::StatusOr<Module> m = client::LoadExported(S(), Fixture(model + ".pt2"), M(mesh), name,
                                                  OptionsFor(model, plan, checkpoint));
  ASSERT_TRUE(m.ok()) << m.status() << shared->cluster.LogHint();
  ASSERT_TRUE(m->info().imported.has_value());
  const client::ImportedInfo& info = *m->info().imported;
  const SafetensorsFile io =
      ReadSafetensorsFile(Fixture(model + (checkpoint ? "_hf" : "") + ".io.safetensors")).value();
  std::vector<HostTensor> inputs;
  for (const client::ProgramEdgeInfo& e : info.inputs) {
    ASSERT_TRUE(io.tensors.contains(e.name)) << e.name;
    inputs.push_back(io.tensors.at(e.name).Clone());
  }
  absl::StatusOr<std::vector<HostTensor>> out = m->ForwardMany(inputs);
  ASSERT_TRUE(out.ok()) << out.status() << shared->cluster.LogHint();
  ASSERT_EQ(out->size(), info.outputs.size());
  EXPECT_LE(testing::LogitsError((*out)[0], io.tensors.at("logits")), 1.0) << name;
  // A second forward of the same program gives the same logits (nothing of the first is left).
  absl::StatusOr<std::vector<HostTensor>> again = m->ForwardMany(inputs);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(testing::LogitsError((*again)[0], (*out)[0]), 0.0);
  if (plan != Plan::kNone && M(mesh).mesh.size() > 1) {
    EXPECT_FALSE(info.styled.empty());
    EXPECT_GT(info.collectives, 0) << name;
  }
  EXPECT_TRUE(client::RemoveModule(S(), name).ok());
}

INSTANTIATE_TEST_SUITE_P(Transformers, ImportedLogitsTest,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "gpt2", "bert"),
                                            ::testing::Values("one", "two", "four", "grid"),
                                            ::testing::Values(Plan::kNone, Plan::kTpPlan,
                                                              Plan::kTorch),
                                            ::testing::Values(false)),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           return absl::StrCat(std::get<0>(p.param), "_", std::get<1>(p.param), "_",
                                               PlanName(std::get<2>(p.param)));
                         });

INSTANTIATE_TEST_SUITE_P(Checkpoints, ImportedLogitsTest,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "gpt2", "bert"),
                                            ::testing::Values("four"),
                                            ::testing::Values(Plan::kTpPlan, Plan::kTorch),
                                            ::testing::Values(true)),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           return absl::StrCat(std::get<0>(p.param), "_",
                                               PlanName(std::get<2>(p.param)), "_hf");
                         });

class ImportedModuleTest : public ::testing::Test {
 protected:
  void TearDown() override {
    absl::StatusOr<std::vector<client::ModuleInfo>> all = client::ListModules(S());
    ASSERT_TRUE(all.ok());
    for (const client::ModuleInfo& m : *all) client::RemoveModule(S(), m.name).IgnoreError();
  }
};

// Show names every parameter by its state_dict name with the placements the tp_plan gives it,
// the program's edges and the modules it styled; state_dict gives back the archive's tensors.
TEST_F(ImportedModuleTest, ShowAndStateDictUsePyTorchsNames) {
  absl::StatusOr<Module> m = client::LoadExported(S(), Fixture("llama.pt2"), M("two"), "llama",
                                                  OptionsFor("llama", Plan::kTpPlan, false));
  ASSERT_TRUE(m.ok()) << m.status();
  const client::ModuleInfo& info = m->info();
  ASSERT_TRUE(info.imported.has_value());
  EXPECT_EQ(info.imported->source, "llama.pt2");
  EXPECT_GT(info.imported->nodes, 10);
  ASSERT_EQ(info.imported->inputs.size(), 1u);
  EXPECT_EQ(info.imported->inputs[0].name, "input_ids");
  EXPECT_EQ(info.imported->inputs[0].spec.dtype, DType::kInt64);
  ASSERT_EQ(info.imported->outputs.size(), 1u);
  EXPECT_EQ(info.imported->outputs[0].spec.placements, std::vector{Placement::Replicate()});
  EXPECT_EQ(info.imported->styled.size(), 9u);
  std::map<std::string, std::vector<Placement>> placements;
  for (const client::ModuleParameter& p : info.parameters) {
    placements[p.fqn] = p.spec.placements;
    EXPECT_EQ(p.tensor, absl::StrCat("llama.", p.fqn));
    EXPECT_EQ(p.shards.size(), 2u);
  }
  EXPECT_EQ(placements.at("model.layers.0.self_attn.q_proj.weight"),
            std::vector{Placement::Shard(0)});
  EXPECT_EQ(placements.at("model.layers.0.self_attn.o_proj.weight"),
            std::vector{Placement::Shard(1)});
  EXPECT_EQ(placements.at("model.embed_tokens.weight"), std::vector{Placement::Shard(0)});
  EXPECT_EQ(placements.at("model.norm.weight"), std::vector{Placement::Replicate()});
  // Listed, and shown again alike.
  absl::StatusOr<std::vector<client::ModuleInfo>> all = client::ListModules(S());
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_TRUE((*all)[0].imported.has_value());
  // state_dict: every weight whole, as the archive stores it.
  const import::ProgramWeights weights = import::ProgramWeights::Open(Fixture("llama.pt2")).value();
  const testing::Weights state = testing::StateDictOf(*m);
  EXPECT_EQ(state.size(), weights.weights().size());
  for (const import::ProgramWeights::Weight& w : weights.weights()) {
    ASSERT_TRUE(state.contains(w.name)) << w.name;
    const HostTensor want = weights.Read(w).value();
    const HostTensor& got = state.at(w.name);
    ASSERT_EQ(got.shape(), want.shape()) << w.name;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.nbytes()), 0) << w.name;
  }
}

// Removing a module frees its parameters and its program; the name loads again.
TEST_F(ImportedModuleTest, RemoveFreesEverythingAndTheNameLoadsAgain) {
  absl::StatusOr<Module> m = client::LoadExported(S(), Fixture("gpt2.pt2"), M("four"), "gpt2",
                                                  OptionsFor("gpt2", Plan::kTorch, false));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(testing::TensorsNamed(S(), "gpt2.").empty());
  ASSERT_TRUE(client::RemoveModule(S(), "gpt2").ok());
  EXPECT_TRUE(testing::TensorsNamed(S(), "gpt2.").empty());
  const SafetensorsFile io = ReadSafetensorsFile(Fixture("gpt2.io.safetensors")).value();
  const std::vector<HostTensor> inputs = Inputs(io.tensors.at("input_ids").Clone());
  EXPECT_TRUE(StatusIs(m->ForwardMany(inputs).status(), absl::StatusCode::kNotFound, {"gpt2"}));
  absl::StatusOr<Module> again = client::LoadExported(S(), Fixture("gpt2.pt2"), M("two"), "gpt2");
  ASSERT_TRUE(again.ok()) << again.status();
  absl::StatusOr<std::vector<HostTensor>> out = again->ForwardMany(inputs);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_LE(testing::LogitsError((*out)[0], io.tensors.at("logits")), 1.0);
}

// A forward whose input is not what the program was exported for is refused naming the input;
// the module works after.
TEST_F(ImportedModuleTest, AWrongInputIsRefusedAndTheModuleStays) {
  absl::StatusOr<Module> m = client::LoadExported(S(), Fixture("bert.pt2"), M("two"), "bert",
                                                  OptionsFor("bert", Plan::kTorch, false));
  ASSERT_TRUE(m.ok()) << m.status();
  const SafetensorsFile io = ReadSafetensorsFile(Fixture("bert.io.safetensors")).value();
  const HostTensor ids = io.tensors.at("input_ids").Clone();
  const std::vector<HostTensor> wrong_shape =
      Inputs(HostTensor::Zeros(DType::kInt64, {1, 3}).value());
  EXPECT_TRUE(StatusIs(m->ForwardMany(wrong_shape).status(), absl::StatusCode::kInvalidArgument,
                       {"input 'input_ids'", "int64[1, 3]", "static"}));
  const std::vector<HostTensor> wrong_dtype =
      Inputs(HostTensor::Zeros(DType::kFloat32, ids.shape()).value());
  EXPECT_TRUE(StatusIs(m->ForwardMany(wrong_dtype).status(), absl::StatusCode::kInvalidArgument,
                       {"input 'input_ids'", "float32"}));
  const std::vector<HostTensor> two = Inputs(ids.Clone(), ids.Clone());
  EXPECT_TRUE(StatusIs(m->ForwardMany(two).status(), absl::StatusCode::kInvalidArgument,
                       {"takes 1 input(s) (input_ids)", "gives 2"}));
  // Ops a program module does not take.
  EXPECT_TRUE(StatusIs(m->Step(ids).status(), absl::StatusCode::kFailedPrecondition,
                       {"'bert' is imported from a program (bert.pt2)", "a training step"}));
  EXPECT_TRUE(
      StatusIs(client::ParallelizeModule(*m, "two", testing::TorchStylePlan("bert")).status(),
               absl::StatusCode::kFailedPrecondition, {"imported from a program"}));
  const std::vector<HostTensor> right = Inputs(ids.Clone());
  absl::StatusOr<std::vector<HostTensor>> out = m->ForwardMany(right);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_LE(testing::LogitsError((*out)[0], io.tensors.at("logits")), 1.0);
}

// Published, a program serves over KServe v2 with its named inputs and outputs: ModelMetadata
// states them with their static shapes; ModelInfer gives transformers' logits; requests that do
// not fit, and dynamic batching (which would change the static shapes), are refused.
TEST_F(ImportedModuleTest, PublishedItServesItsNamedInputsOverKServe) {
  absl::StatusOr<Module> m = client::LoadExported(S(), Fixture("llama.pt2"), M("four"), "llama",
                                                  OptionsFor("llama", Plan::kTpPlan, true));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(StatusIs(m->Publish({.max_batch_size = 4}).status(),
                       absl::StatusCode::kInvalidArgument, {"static shapes", "max_batch_size 4"}));
  absl::StatusOr<client::PublishedVersion> published = m->Publish({.model = "lm"});
  ASSERT_TRUE(published.ok()) << published.status();
  auto kserve = inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(shared->cluster.cluster->address(), grpc::InsecureChannelCredentials()));
  const std::string output = m->info().imported->outputs[0].name;
  {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(absl::Seconds(30)));
    inference::ModelMetadataRequest request;
    request.set_name("lm");
    inference::ModelMetadataResponse meta;
    ASSERT_TRUE(kserve->ModelMetadata(&context, request, &meta).ok());
    ASSERT_EQ(meta.inputs_size(), 1);
    EXPECT_EQ(meta.inputs(0).name(), "input_ids");
    EXPECT_EQ(meta.inputs(0).datatype(), "INT64");
    EXPECT_EQ(std::vector<int64_t>(meta.inputs(0).shape().begin(), meta.inputs(0).shape().end()),
              (std::vector<int64_t>{1, 6}));
    ASSERT_EQ(meta.outputs_size(), 1);
    EXPECT_EQ(meta.outputs(0).name(), output);
    EXPECT_EQ(meta.outputs(0).datatype(), "FP32");
  }
  const SafetensorsFile io = ReadSafetensorsFile(Fixture("llama_hf.io.safetensors")).value();
  const HostTensor& ids = io.tensors.at("input_ids");
  const auto infer = [&](const std::string& name, const Shape& shape,
                         inference::ModelInferResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(absl::Seconds(30)));
    inference::ModelInferRequest request;
    request.set_model_name("lm");
    auto* in = request.add_inputs();
    in->set_name(name);
    in->set_datatype("INT64");
    for (int64_t d : shape) in->add_shape(d);
    request.add_raw_input_contents(reinterpret_cast<const char*>(ids.data()),
                                   static_cast<size_t>(NumElements(shape)) * 8);
    request.add_outputs()->set_name(output);
    return FromGrpcStatus(kserve->ModelInfer(&context, request, response));
  };
  inference::ModelInferResponse response;
  ASSERT_TRUE(infer("input_ids", ids.shape(), &response).ok());
  ASSERT_EQ(response.outputs_size(), 1);
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  const std::string& raw = response.raw_output_contents(0);
  const HostTensor logits = HostTensor::FromBytes(DType::kFloat32, io.tensors.at("logits").shape(),
                                                  std::as_bytes(std::span(raw.data(), raw.size())))
                                .value();
  EXPECT_LE(testing::LogitsError(logits, io.tensors.at("logits")), 1.0);
  inference::ModelInferResponse refused;
  EXPECT_TRUE(StatusIs(infer("input_ids", {1, 3}, &refused), absl::StatusCode::kInvalidArgument,
                       {"input 'input_ids' of model 'lm'", "[1, 6]"}));
  EXPECT_TRUE(StatusIs(infer("token_type_ids", ids.shape(), &refused),
                       absl::StatusCode::kInvalidArgument, {"no input 'token_type_ids'"}));
  ASSERT_TRUE(client::Unpublish(S(), "lm").ok());
}

// A LoadModule stream written by hand: `program_json` with the weights' header `weights` (and no
// bytes after it unless `send_bytes`, the archive's own in order).
absl::Status LoadByHand(const std::string& name, const std::string& program_json,
                        const std::vector<v1::WeightsEntry>& weights,
                        const import::ProgramWeights* send_bytes = nullptr) {
  auto stub = v1::ModuleService::NewStub(
      grpc::CreateChannel(shared->cluster.cluster->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(absl::Seconds(60)));
  v1::ModuleInfo info;
  auto writer = stub->LoadModule(&context, &info);
  v1::LoadModuleChunk chunk;
  v1::LoadModuleHeader* h = chunk.mutable_header();
  h->set_name(name);
  h->set_mesh("two");
  h->set_weights_follow(true);
  h->mutable_program()->set_program_json(program_json);
  h->mutable_program()->set_mesh_dim(-1);
  h->mutable_program()->set_source("by-hand.pt2");
  for (const v1::WeightsEntry& w : weights) *chunk.mutable_weights()->add_tensors() = w;
  if (writer->Write(chunk) && send_bytes != nullptr) {
    for (const import::ProgramWeights::Weight& w : send_bytes->weights()) {
      const HostTensor t = send_bytes->Read(w).value();
      v1::LoadModuleChunk data;
      data.set_data(reinterpret_cast<const char*>(t.data()), t.nbytes());
      if (!writer->Write(data)) break;
    }
  }
  writer->WritesDone();
  return FromGrpcStatus(writer->Finish());
}

std::vector<v1::WeightsEntry> HeaderOf(const import::ProgramWeights& weights) {
  std::vector<v1::WeightsEntry> entries;
  for (const import::ProgramWeights::Weight& w : weights.weights()) {
    v1::WeightsEntry e;
    e.set_name(w.name);
    e.set_dtype(ToProto(w.meta.dtype));
    *e.mutable_shape() = ToProto(w.meta.shape);
    entries.push_back(std::move(e));
  }
  return entries;
}

// Malformed programs and weights: each refused with its code naming the value, before any byte
// reaches a worker; no module, no parameter left, the name free.
TEST_F(ImportedModuleTest, MalformedProgramsAndWeightsLeaveNothing) {
  const import::ProgramWeights weights = import::ProgramWeights::Open(Fixture("llama.pt2")).value();
  const std::string json = weights.model().json.dump();
  const std::vector<v1::WeightsEntry> header = HeaderOf(weights);
  // An op the registry lacks: listed by name and count.
  const std::string unknown = absl::StrReplaceAll(
      json, {{"torch.ops.aten.linear.default", "torch.ops.aten.frobnicate.default"}});
  EXPECT_TRUE(StatusIs(LoadByHand("bad", unknown, header), absl::StatusCode::kUnimplemented,
                       {"aten::frobnicate", "nodes)", "nothing was loaded"}));
  // Not JSON.
  EXPECT_TRUE(StatusIs(LoadByHand("bad", "{\"graph_module\": ", header),
                       absl::StatusCode::kInvalidArgument, {"by-hand.pt2"}));
  // A weight missing, extra, or of another shape.
  std::vector<v1::WeightsEntry> missing = header;
  const std::string lost = missing.back().name();
  missing.pop_back();
  EXPECT_TRUE(StatusIs(LoadByHand("bad", json, missing), absl::StatusCode::kInvalidArgument,
                       {"the weights lack", lost}));
  std::vector<v1::WeightsEntry> extra = header;
  extra.push_back(header[0]);
  extra.back().set_name("model.no_such.weight");
  EXPECT_TRUE(StatusIs(LoadByHand("bad", json, extra), absl::StatusCode::kInvalidArgument,
                       {"'model.no_such.weight' is no parameter"}));
  std::vector<v1::WeightsEntry> reshaped = header;
  reshaped[0].mutable_shape()->add_dims(2);
  EXPECT_TRUE(StatusIs(LoadByHand("bad", json, reshaped), absl::StatusCode::kInvalidArgument,
                       {header[0].name(), "is float32"}));
  // A stream cut short in the weights' bytes: what was routed already is freed.
  EXPECT_TRUE(StatusIs(LoadByHand("bad", json, header), absl::StatusCode::kInvalidArgument,
                       {"the stream ended in the bytes of weights tensor"}));
  // A plan style on a module it cannot style.
  client::LoadExportedOptions bad_plan;
  bad_plan.tp_plan_json = R"({"model.norm": "colwise"})";
  EXPECT_TRUE(
      StatusIs(client::LoadExported(S(), Fixture("llama.pt2"), M("two"), "bad", bad_plan).status(),
               absl::StatusCode::kInvalidArgument, {"model.norm"}));
  bad_plan.tp_plan_json = R"({"model.layers.*.self_attn.q_proj": "sideways"})";
  EXPECT_TRUE(
      StatusIs(client::LoadExported(S(), Fixture("llama.pt2"), M("two"), "bad", bad_plan).status(),
               absl::StatusCode::kInvalidArgument, {"sideways"}));
  absl::StatusOr<std::vector<client::ModuleInfo>> all = client::ListModules(S());
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->empty());
  EXPECT_TRUE(testing::TensorsNamed(S(), "bad.").empty());
  // The whole stream, by hand, loads.
  ASSERT_TRUE(LoadByHand("bad", json, header, &weights).ok());
  EXPECT_FALSE(testing::TensorsNamed(S(), "bad.").empty());
  // A name taken is ALREADY_EXISTS, and the module there stays whole.
  EXPECT_TRUE(StatusIs(LoadByHand("bad", json, header, &weights), absl::StatusCode::kAlreadyExists,
                       {"bad"}));
  absl::StatusOr<Module> m = client::GetModule(S(), "bad");
  ASSERT_TRUE(m.ok());
  const SafetensorsFile io = ReadSafetensorsFile(Fixture("llama.io.safetensors")).value();
  const std::vector<HostTensor> inputs = Inputs(io.tensors.at("input_ids").Clone());
  absl::StatusOr<std::vector<HostTensor>> out = m->ForwardMany(inputs);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_LE(testing::LogitsError((*out)[0], io.tensors.at("logits")), 1.0);
}

// A coordinator killed and restarted with its state kept brings an imported module back from its
// record: built again from its program and plan, its parameters found by name, its graph program
// installed anew; the same layouts, the same state_dict bit for bit, the same logits bit for bit.
TEST(ImportedModuleRecovery, AnImportedModuleSurvivesACoordinatorKill) {
  testing::TestCluster cluster;
  LocalClusterOptions options = testing::TestClusterOptions(2);
  options.keep_state = true;
  options.recovery_wait = absl::Seconds(4);
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.LogHint();
  Session& admin = *cluster.client;
  absl::StatusOr<client::MeshInfo> mesh =
      client::InitDeviceMesh(admin, testing::TestDevice(), {2}, {"tp"}, "pair", {});
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  absl::StatusOr<Module> m =
      client::LoadExported(admin, Fixture("qwen2.pt2"), client::Mesh{mesh->name, mesh->mesh},
                           "qwen2", OptionsFor("qwen2", Plan::kTpPlan, true));
  ASSERT_TRUE(m.ok()) << m.status() << cluster.LogHint();
  const SafetensorsFile io = ReadSafetensorsFile(Fixture("qwen2_hf.io.safetensors")).value();
  const std::vector<HostTensor> inputs = Inputs(io.tensors.at("input_ids").Clone());
  absl::StatusOr<std::vector<HostTensor>> before = m->ForwardMany(inputs);
  ASSERT_TRUE(before.ok()) << before.status();
  const testing::Weights state = testing::StateDictOf(*m);

  ASSERT_TRUE(cluster.cluster->KillCoordinator().ok());
  ASSERT_TRUE(cluster.cluster->RestartCoordinator().ok()) << cluster.LogHint();
  absl::StatusOr<Module> back =
      testing::RetryUnavailable([&] { return client::GetModule(admin, "qwen2"); });
  ASSERT_TRUE(back.ok()) << back.status() << cluster.LogHint();
  ASSERT_TRUE(back->info().imported.has_value());
  EXPECT_EQ(back->info().imported->styled, m->info().imported->styled);
  ASSERT_EQ(back->info().parameters.size(), m->info().parameters.size());
  for (size_t i = 0; i < m->info().parameters.size(); ++i) {
    EXPECT_EQ(back->info().parameters[i].fqn, m->info().parameters[i].fqn);
    EXPECT_EQ(back->info().parameters[i].spec.placements, m->info().parameters[i].spec.placements);
  }
  const testing::Weights again = testing::StateDictOf(*back);
  ASSERT_EQ(again.size(), state.size());
  for (const auto& [name, t] : state) {
    ASSERT_TRUE(again.contains(name)) << name;
    EXPECT_TRUE(again.at(name).BitEqual(t)) << name;
  }
  absl::StatusOr<std::vector<HostTensor>> after = back->ForwardMany(inputs);
  ASSERT_TRUE(after.ok()) << after.status() << cluster.LogHint();
  EXPECT_TRUE((*after)[0].BitEqual((*before)[0])) << "the logits differ from before the restart";
  EXPECT_LE(testing::LogitsError((*after)[0], io.tensors.at("logits")), 1.0);
  // Removed, it stays removed across the next restart.
  ASSERT_TRUE(back->Remove().ok());
  ASSERT_TRUE(cluster.cluster->KillCoordinator().ok());
  ASSERT_TRUE(cluster.cluster->RestartCoordinator().ok()) << cluster.LogHint();
  absl::StatusOr<Module> gone =
      testing::RetryUnavailable([&] { return client::GetModule(admin, "qwen2"); });
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound) << gone.status();
  cluster.Stop();
}

// A worker of a 2x2 mesh killed and started again empty: once the mesh takes it back, an imported
// module laid out on tp (replicated along dp, so every block has a replica) is built again for the
// mesh set up anew, its parameters repaired from the replicas and its graph program installed;
// its logits are bit for bit what they were.
TEST(ImportedModuleRejoin, AnImportedModuleIsReinstalledWhenItsMeshTakesAWorkerBack) {
  testing::TestCluster cluster;
  ASSERT_TRUE(cluster.Start(testing::TestClusterOptions(4)).ok()) << cluster.LogHint();
  Session& admin = *cluster.client;
  absl::StatusOr<client::MeshInfo> grid =
      client::InitDeviceMesh(admin, testing::TestDevice(), {2, 2}, {"dp", "tp"}, "grid", {});
  ASSERT_TRUE(grid.ok()) << grid.status();
  client::LoadExportedOptions options = OptionsFor("llama", Plan::kTpPlan, true);
  options.mesh_dim = 1;
  absl::StatusOr<Module> m = client::LoadExported(
      admin, Fixture("llama.pt2"), client::Mesh{grid->name, grid->mesh}, "llama", options);
  ASSERT_TRUE(m.ok()) << m.status() << cluster.LogHint();
  const SafetensorsFile io = ReadSafetensorsFile(Fixture("llama_hf.io.safetensors")).value();
  const std::vector<HostTensor> inputs = Inputs(io.tensors.at("input_ids").Clone());
  absl::StatusOr<std::vector<HostTensor>> before = m->ForwardMany(inputs);
  ASSERT_TRUE(before.ok()) << before.status();

  ASSERT_TRUE(cluster.cluster->KillWorker(2).ok());
  ASSERT_TRUE(cluster.cluster->RestartWorker(2).ok()) << cluster.LogHint();
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  absl::StatusOr<std::vector<HostTensor>> after = absl::UnavailableError("not yet");
  while (absl::Now() < deadline) {
    absl::StatusOr<Module> back = client::GetModule(admin, "llama");
    after = back.ok() ? back->ForwardMany(inputs) : back.status();
    if (after.ok() || after.status().code() == absl::StatusCode::kDataLoss) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  ASSERT_TRUE(after.ok()) << after.status() << cluster.LogHint();
  EXPECT_TRUE((*after)[0].BitEqual((*before)[0])) << "the logits differ from before";
  cluster.Stop();
}

}  // namespace
}  // namespace tessera
