// KServe v2 inference of published modules on a real local cluster (a coordinator and 4 CPU
// workers; meshes tp of 4 and dp 2 x tp 2), through the generated stub of
// inference.GRPCInferenceService on the coordinator's address, against the single-process
// reference (reference/module_reference.h): an MLP, a transformer block on [-1, -1, 16] and an
// Embedding-first model on int64 ids, each loaded from safetensors, parallelized by torch's plan
// and published with and without dynamic batching. Health, ModelReady, ModelMetadata, ModelInfer
// with FP32 raw and typed contents, FP16, BF16 and FP64 raw (converted) and INT64 ids; versions
// and the default (highest) one; 16 concurrent requests each getting exactly its own rows;
// malformed requests refused with their codes and messages, the model answering as before after
// them; unpublishing, removing the module and deleting its mesh.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <latch>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/dtype.h"
#include "core/host_tensor.h"
#include "core/modules/module_spec.h"
#include "core/shape.h"
#include "core/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "kernels/testing/reference.h"
#include "proto/grpc_status.h"
#include "reference/module_reference.h"
#include "tessera/tessera.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/cluster/module_cluster.h"
#include "tests/support/status_assertions.h"
#include "tests/support/test_models.h"

namespace tessera {
namespace {

using ::tessera::testing::kMegatron;
using ::tessera::testing::kMlpPlan;
using ::tessera::testing::kVocabParallel;

using ::tessera::client::Module;
using ::tessera::testing::StatusIs;
using ::tessera::testing::TensorsMatch;
using ::tessera::testing::Weights;

testing::ModuleCluster* shared = nullptr;
const auto* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new testing::ModuleClusterEnvironment(
        testing::TestClusterOptions(4), {{"tp", {4}, {"tp"}}, {"grid", {2, 2}, {"dp", "tp"}}},
        &shared));

client::Session& S() { return *shared->session; }

// ---------------------------------------------------------------------------------------------
// The models served.

// MLP(net1 = Linear(10, 16), relu, net2 = Linear(16, 12)); its input is [-1, 10] float32.
constexpr char kMlp[] = R"js({"type": "Module", "children": [
  {"name": "net1", "type": "Linear", "in_features": 10, "out_features": 16},
  {"name": "relu", "type": "ReLU"},
  {"name": "net2", "type": "Linear", "in_features": 16, "out_features": 12}]})js";
constexpr const char* kBlock = testing::kBlockDim16Float32;

// Token ids [batch, seq] -> an Embedding of 30 tokens -> an MLP.
constexpr int64_t kVocab = 30;
constexpr char kEmbedding[] = R"js({"type": "Module", "children": [
  {"name": "tok", "type": "Embedding", "num_embeddings": 30, "embedding_dim": 16},
  {"name": "net1", "type": "Linear", "in_features": 16, "out_features": 32},
  {"name": "relu", "type": "ReLU"},
  {"name": "net2", "type": "Linear", "in_features": 32, "out_features": 16}]})js";
// How a request carries its input.
enum class Wire { kFp32Raw, kFp32Typed, kFp16Raw, kBf16Raw, kFp64Raw, kInt64Raw, kInt64Typed };

std::string WireName(Wire w) {
  switch (w) {
    case Wire::kFp32Raw:
      return "fp32_raw";
    case Wire::kFp32Typed:
      return "fp32_typed";
    case Wire::kFp16Raw:
      return "fp16_raw";
    case Wire::kBf16Raw:
      return "bf16_raw";
    case Wire::kFp64Raw:
      return "fp64_raw";
    case Wire::kInt64Raw:
      return "int64_raw";
    case Wire::kInt64Typed:
      return "int64_typed";
  }
  return "?";
}

// The dtype a wire form sends and KServe's datatype string for it.
DType WireDType(Wire w) {
  switch (w) {
    case Wire::kFp32Raw:
    case Wire::kFp32Typed:
      return DType::kFloat32;
    case Wire::kFp16Raw:
      return DType::kFloat16;
    case Wire::kBf16Raw:
      return DType::kBFloat16;
    case Wire::kFp64Raw:
      return DType::kFloat64;
    case Wire::kInt64Raw:
    case Wire::kInt64Typed:
      return DType::kInt64;
  }
  return DType::kFloat32;
}
std::string Datatype(Wire w) {
  switch (WireDType(w)) {
    case DType::kFloat16:
      return "FP16";
    case DType::kBFloat16:
      return "BF16";
    case DType::kFloat64:
      return "FP64";
    case DType::kInt64:
      return "INT64";
    default:
      return "FP32";
  }
}
bool Typed(Wire w) { return w == Wire::kFp32Typed || w == Wire::kInt64Typed; }

// A served model: its spec and plan, what ModelMetadata states, and a request's shape.
struct ModelCase {
  std::string name;
  const char* spec;
  const char* plan;
  std::string input_datatype;
  std::vector<int64_t> input_shape;   // as ModelMetadata states it, -1 where it varies
  std::vector<int64_t> output_shape;  // the same
  std::vector<Wire> wires;            // the forms requests take
  // A request of `rows` rows (and `seq` positions where there is a sequence).
  Shape RequestShape(int64_t rows, int64_t seq) const {
    if (name == "mlp") return {rows, 10};
    if (name == "block") return {rows, seq, 16};
    return {rows, seq};
  }
};

void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.name; }

const ModelCase kMlpCase = {
    "mlp",
    kMlp,
    kMlpPlan,
    "FP32",
    {-1, 10},
    {-1, 12},
    {Wire::kFp32Raw, Wire::kFp32Typed, Wire::kFp16Raw, Wire::kBf16Raw, Wire::kFp64Raw}};
const ModelCase kBlockCase = {"block",
                              kBlock,
                              kMegatron,
                              "FP32",
                              {-1, -1, 16},
                              {-1, -1, 16},
                              {Wire::kFp32Raw, Wire::kFp32Typed, Wire::kFp16Raw, Wire::kBf16Raw}};
const ModelCase kEmbeddingCase = {"embedding",
                                  kEmbedding,
                                  kVocabParallel,
                                  "INT64",
                                  {-1, -1},
                                  {-1, -1, 16},
                                  {Wire::kInt64Raw, Wire::kInt64Typed}};

// An input of `shape` in the wire's dtype: values in [-1, 1] exact in that dtype, or token ids.
HostTensor WireInput(Wire w, const Shape& shape, uint32_t seed) {
  if (WireDType(w) == DType::kInt64) {
    return kernels::testing::RandomTensor(DType::kInt64, shape, seed, 0, kVocab - 1);
  }
  return kernels::testing::RandomTensor(WireDType(w), shape, seed, -1, 1);
}

// `t` as the model sees it: floating values widened or narrowed to float32 (exact from FP16 and
// BF16, rounded to nearest from FP64), ids as they are.
HostTensor ModelInput(const HostTensor& t) {
  if (!IsFloatingPoint(t.dtype()) || t.dtype() == DType::kFloat32) return t.Clone();
  HostTensor f = HostTensor::Zeros(DType::kFloat32, t.shape()).value();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    f.data_as<float>()[i] = static_cast<float>(kernels::testing::GetDouble(t, i));
  }
  return f;
}

// ---------------------------------------------------------------------------------------------
// The KServe v2 client: the generated stub on the coordinator's address.

inference::GRPCInferenceService::Stub& KServe() {
  static inference::GRPCInferenceService::Stub* const stub =
      inference::GRPCInferenceService::NewStub(
          grpc::CreateChannel(shared->cluster.cluster->address(),
                              grpc::InsecureChannelCredentials()))
          .release();
  return *stub;
}

// A client context whose call has 30 seconds.
std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(DeadlineAfter(absl::Seconds(30)));
  return context;
}

// A request for `model` (version "" for the default) whose one input "input" is `x` in `wire`'s
// form.
inference::ModelInferRequest Request(const std::string& model, const std::string& version,
                                     const HostTensor& x, Wire wire, const std::string& id = "") {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  request.set_model_version(version);
  request.set_id(id);
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype(Datatype(wire));
  for (int64_t d : x.shape()) input->add_shape(d);
  if (!Typed(wire)) {
    request.add_raw_input_contents(reinterpret_cast<const char*>(x.data()), x.nbytes());
  } else if (x.dtype() == DType::kInt64) {
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      input->mutable_contents()->add_int64_contents(x.data_as<int64_t>()[i]);
    }
  } else {
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      input->mutable_contents()->add_fp32_contents(x.data_as<float>()[i]);
    }
  }
  return request;
}

absl::StatusOr<inference::ModelInferResponse> Infer(const inference::ModelInferRequest& request) {
  inference::ModelInferResponse response;
  RETURN_IF_ERROR(FromGrpcStatus(KServe().ModelInfer(Context().get(), request, &response)));
  return response;
}

// The response's one output as a float32 tensor, after checking that it is named "output", FP32,
// of `shape`, with exactly its bytes as raw contents.
absl::StatusOr<HostTensor> OutputOf(const inference::ModelInferResponse& response,
                                    const Shape& shape) {
  if (response.outputs_size() != 1 || response.raw_output_contents_size() != 1) {
    return absl::InternalError(absl::StrCat(response.outputs_size(), " outputs and ",
                                            response.raw_output_contents_size(),
                                            " raw contents; want 1 and 1"));
  }
  const auto& out = response.outputs(0);
  const Shape got(out.shape().begin(), out.shape().end());
  if (out.name() != "output" || out.datatype() != "FP32" || got != shape) {
    return absl::InternalError(absl::StrCat("output '", out.name(), "' ", out.datatype(),
                                            ShapeToString(got), "; want 'output' FP32",
                                            ShapeToString(shape)));
  }
  HostTensor y = HostTensor::Zeros(DType::kFloat32, shape).value();
  const std::string& raw = response.raw_output_contents(0);
  if (raw.size() != y.nbytes()) {
    return absl::InternalError(absl::StrCat(raw.size(), " output bytes; want ", y.nbytes()));
  }
  std::memcpy(y.data(), raw.data(), raw.size());
  return y;
}

// The output shape for an input of `shape`: the last dim becomes `features` (appended for ids).
Shape OutputShape(const Shape& input, DType dtype, int64_t features) {
  Shape out = input;
  if (IsFloatingPoint(dtype)) out.pop_back();
  out.push_back(features);
  return out;
}

// ModelInfer of `x` in `wire`'s form gives the reference's forward of what the model sees.
void ExpectServedMatchesReference(const std::string& model, const std::string& version,
                                  const ReferenceModel& reference, const HostTensor& x, Wire wire,
                                  int64_t features) {
  SCOPED_TRACE(absl::StrCat(model, " version '", version, "', ", WireName(wire), " ",
                            ShapeToString(x.shape())));
  const HostTensor seen = ModelInput(x);
  absl::StatusOr<HostTensor> want = ReferenceForward(reference, seen);
  ASSERT_TRUE(want.ok()) << want.status();
  const std::string id = absl::StrCat("req-", WireName(wire));
  absl::StatusOr<inference::ModelInferResponse> response =
      Infer(Request(model, version, x, wire, id));
  ASSERT_TRUE(response.ok()) << response.status() << shared->cluster.LogHint();
  EXPECT_EQ(response->model_name(), model);
  if (!version.empty()) {
    EXPECT_EQ(response->model_version(), version);
  }
  EXPECT_EQ(response->id(), id);
  absl::StatusOr<HostTensor> got =
      OutputOf(*response, OutputShape(x.shape(), seen.dtype(), features));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(TensorsMatch(*got, *want, testing::kFloat32Rtol, testing::kFloat32Atol));
}

bool ModelReady(const std::string& model, const std::string& version = "") {
  inference::ModelReadyRequest request;
  request.set_name(model);
  request.set_version(version);
  inference::ModelReadyResponse response;
  const grpc::Status s = KServe().ModelReady(Context().get(), request, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return response.ready();
}

absl::StatusOr<inference::ModelMetadataResponse> Metadata(const std::string& model,
                                                          const std::string& version = "") {
  inference::ModelMetadataRequest request;
  request.set_name(model);
  request.set_version(version);
  inference::ModelMetadataResponse response;
  RETURN_IF_ERROR(FromGrpcStatus(KServe().ModelMetadata(Context().get(), request, &response)));
  return response;
}

std::vector<std::string> Versions(const inference::ModelMetadataResponse& m) {
  return {m.versions().begin(), m.versions().end()};
}
std::vector<int64_t> ShapeOf(const inference::ModelMetadataResponse::TensorMetadata& t) {
  return {t.shape().begin(), t.shape().end()};
}

// Loads `c` as `name` on `mesh` from safetensors of the reference's parameters (seed `seed`) and
// parallelizes it by the case's plan; `reference` gets the same parameters.
absl::StatusOr<Module> LoadCase(const ModelCase& c, const std::string& name,
                                const std::string& mesh, uint64_t seed, ReferenceModel* reference) {
  absl::StatusOr<ModelSpec> spec = ParseModelSpec(c.spec);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<Weights> params = RandomParameters(*spec, seed);
  if (!params.ok()) return params.status();
  *reference = testing::ReferenceOf(c.spec, *params);
  return testing::LoadAndParallelize(*shared, name, c.spec, *params, mesh, c.plan);
}

// Output features of each case.
int64_t FeaturesOf(const ModelCase& c) { return c.output_shape.back(); }

// ---------------------------------------------------------------------------------------------

TEST(ServingTest, ServerIsLiveReadyAndNamesItself) {
  inference::ServerLiveResponse live;
  ASSERT_TRUE(KServe().ServerLive(Context().get(), {}, &live).ok());
  EXPECT_TRUE(live.live());
  inference::ServerReadyResponse ready;
  ASSERT_TRUE(KServe().ServerReady(Context().get(), {}, &ready).ok());
  EXPECT_TRUE(ready.ready());
  inference::ServerMetadataResponse metadata;
  ASSERT_TRUE(KServe().ServerMetadata(Context().get(), {}, &metadata).ok());
  EXPECT_EQ(metadata.name(), "tessera");
  EXPECT_FALSE(metadata.version().empty());
}

// (model, mesh, max_batch_size).
using ServeCase = std::tuple<ModelCase, std::string, int64_t>;
class PublishedModuleTest : public ::testing::TestWithParam<ServeCase> {};

// A published module is ready, describes itself, and answers every input form as the reference;
// unpublished it is neither ready nor found, and the module itself stays.
TEST_P(PublishedModuleTest, ServesTheReferenceForwardUntilUnpublished) {
  const auto& [c, mesh, max_batch_size] = GetParam();
  const std::string name = absl::StrCat("served_", c.name, "_", mesh, "_", max_batch_size);
  ReferenceModel reference;
  absl::StatusOr<Module> m = LoadCase(c, name, mesh, /*seed=*/3, &reference);
  ASSERT_TRUE(m.ok()) << m.status() << shared->cluster.LogHint();
  absl::StatusOr<client::PublishedVersion> published =
      m->Publish({.max_batch_size = max_batch_size, .max_queue_delay = absl::Milliseconds(2)});
  ASSERT_TRUE(published.ok()) << published.status();
  EXPECT_EQ(published->model, name);
  EXPECT_EQ(published->version, "1");

  EXPECT_TRUE(ModelReady(name));
  EXPECT_TRUE(ModelReady(name, "1"));
  EXPECT_FALSE(ModelReady(name, "2"));
  absl::StatusOr<inference::ModelMetadataResponse> metadata = Metadata(name);
  ASSERT_TRUE(metadata.ok()) << metadata.status();
  EXPECT_EQ(metadata->name(), name);
  EXPECT_EQ(Versions(*metadata), std::vector<std::string>{"1"});
  EXPECT_EQ(metadata->platform(), "tessera");
  ASSERT_EQ(metadata->inputs_size(), 1);
  EXPECT_EQ(metadata->inputs(0).name(), "input");
  EXPECT_EQ(metadata->inputs(0).datatype(), c.input_datatype);
  EXPECT_EQ(ShapeOf(metadata->inputs(0)), c.input_shape);
  ASSERT_EQ(metadata->outputs_size(), 1);
  EXPECT_EQ(metadata->outputs(0).name(), "output");
  EXPECT_EQ(metadata->outputs(0).datatype(), "FP32");
  EXPECT_EQ(ShapeOf(metadata->outputs(0)), c.output_shape);

  uint32_t seed = 100;
  for (Wire wire : c.wires) {
    for (int64_t rows : {int64_t{1}, int64_t{3}}) {
      const HostTensor x = WireInput(wire, c.RequestShape(rows, 5), seed++);
      ExpectServedMatchesReference(name, "", reference, x, wire, FeaturesOf(c));
      ExpectServedMatchesReference(name, "1", reference, x, wire, FeaturesOf(c));
    }
  }

  ASSERT_TRUE(client::Unpublish(S(), name).ok());
  EXPECT_FALSE(ModelReady(name));
  EXPECT_FALSE(ModelReady(name, "1"));
  EXPECT_TRUE(StatusIs(Metadata(name).status(), absl::StatusCode::kNotFound, {name}));
  const HostTensor x = WireInput(c.wires[0], c.RequestShape(2, 4), 7);
  EXPECT_TRUE(StatusIs(Infer(Request(name, "", x, c.wires[0])).status(),
                       absl::StatusCode::kNotFound, {name}));
  absl::StatusOr<client::ModuleInfo> info = m->Show();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->published.empty());
  // The module stays, and publishes again.
  testing::ExpectForwardMatchesReference(*m, reference, ModelInput(x));
  ASSERT_TRUE(m->Publish({.max_batch_size = max_batch_size}).ok());
  ExpectServedMatchesReference(name, "1", reference, x, c.wires[0], FeaturesOf(c));
  EXPECT_TRUE(m->Remove().ok());
  EXPECT_FALSE(ModelReady(name));
}

INSTANTIATE_TEST_SUITE_P(Cluster, PublishedModuleTest,
                         ::testing::Combine(::testing::Values(kMlpCase, kBlockCase, kEmbeddingCase),
                                            ::testing::Values("tp", "grid"),
                                            ::testing::Values(int64_t{0}, int64_t{8})),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param).name, "_",
                                               std::get<1>(info.param), "_batch",
                                               std::get<2>(info.param));
                         });

// Two modules with other weights published as versions "1" and "2" of one model: the default is
// the highest, each version answers with its own module, and removing a module takes only its
// version away.
TEST(ServingTest, VersionsAnswerWithTheirOwnModuleAndTheHighestIsTheDefault) {
  const std::string model = "versioned";
  ReferenceModel first, second;
  absl::StatusOr<Module> a = LoadCase(kMlpCase, "versioned_a", "tp", /*seed=*/11, &first);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<Module> b = LoadCase(kMlpCase, "versioned_b", "grid", /*seed=*/12, &second);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(a->Publish({.model = model, .version = "1"}).ok());
  ASSERT_TRUE(b->Publish({.model = model, .version = "2", .max_batch_size = 8}).ok());

  absl::StatusOr<inference::ModelMetadataResponse> all = Metadata(model);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(Versions(*all), (std::vector<std::string>{"1", "2"}));
  absl::StatusOr<inference::ModelMetadataResponse> one = Metadata(model, "1");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(Versions(*one), std::vector<std::string>{"1"});
  EXPECT_TRUE(ModelReady(model, "1"));
  EXPECT_TRUE(ModelReady(model, "2"));
  EXPECT_FALSE(ModelReady(model, "3"));

  const HostTensor x = WireInput(Wire::kFp32Raw, {4, 10}, 21);
  ExpectServedMatchesReference(model, "1", first, x, Wire::kFp32Raw, 12);
  ExpectServedMatchesReference(model, "2", second, x, Wire::kFp32Raw, 12);
  ExpectServedMatchesReference(model, "", second, x, Wire::kFp32Raw, 12);
  absl::StatusOr<inference::ModelInferResponse> by_default =
      Infer(Request(model, "", x, Wire::kFp32Raw));
  ASSERT_TRUE(by_default.ok()) << by_default.status();
  EXPECT_EQ(by_default->model_version(), "2");
  // The two modules differ, so the comparisons above tell the versions apart.
  EXPECT_FALSE(TensorsMatch(ReferenceForward(first, x).value(), ReferenceForward(second, x).value(),
                            1e-3, 1e-3));
  EXPECT_TRUE(StatusIs(Infer(Request(model, "3", x, Wire::kFp32Raw)).status(),
                       absl::StatusCode::kNotFound, {"'versioned'", "version 3", "1, 2"}));
  EXPECT_TRUE(StatusIs(Metadata(model, "3").status(), absl::StatusCode::kNotFound, {"3"}));

  // Version 2 goes with its module; version 1 is the default now.
  ASSERT_TRUE(b->Remove().ok());
  EXPECT_FALSE(ModelReady(model, "2"));
  EXPECT_TRUE(ModelReady(model));
  all = Metadata(model);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(Versions(*all), std::vector<std::string>{"1"});
  ExpectServedMatchesReference(model, "", first, x, Wire::kFp32Raw, 12);
  EXPECT_TRUE(StatusIs(Infer(Request(model, "2", x, Wire::kFp32Raw)).status(),
                       absl::StatusCode::kNotFound, {"version 2"}));
  ASSERT_TRUE(a->Remove().ok());
  EXPECT_FALSE(ModelReady(model));
  EXPECT_TRUE(StatusIs(Infer(Request(model, "", x, Wire::kFp32Raw)).status(),
                       absl::StatusCode::kNotFound, {"'versioned'"}));
}

// (model, max_batch_size).
using ConcurrentCase = std::tuple<ModelCase, int64_t>;
class ConcurrentInferTest : public ::testing::TestWithParam<ConcurrentCase> {};

// 16 requests at once, of 1 to 3 rows (and two sequence lengths for the block), each different:
// with batching on they are joined into batches of up to 8 rows (the block's by sequence length),
// and every request gets exactly its own rows of the output, as without batching.
TEST_P(ConcurrentInferTest, EveryRequestGetsItsOwnRows) {
  const auto& [c, max_batch_size] = GetParam();
  const std::string name = absl::StrCat("concurrent_", c.name, "_", max_batch_size);
  ReferenceModel reference;
  absl::StatusOr<Module> m = LoadCase(c, name, "grid", /*seed=*/5, &reference);
  ASSERT_TRUE(m.ok()) << m.status() << shared->cluster.LogHint();
  ASSERT_TRUE(
      m->Publish({.max_batch_size = max_batch_size, .max_queue_delay = absl::Milliseconds(20)})
          .ok());
  constexpr int kRequests = 16;
  std::vector<HostTensor> inputs;
  for (int k = 0; k < kRequests; ++k) {
    inputs.push_back(WireInput(c.wires[0], c.RequestShape(1 + k % 3, 3 + k % 2), 300 + k));
  }
  std::vector<absl::StatusOr<inference::ModelInferResponse>> responses(
      kRequests, absl::UnknownError("not run"));
  std::latch start(kRequests);
  std::vector<std::thread> threads;
  for (int k = 0; k < kRequests; ++k) {
    threads.emplace_back([&, k] {
      const inference::ModelInferRequest request =
          Request(name, "", inputs[k], c.wires[0], absl::StrCat("request-", k));
      start.arrive_and_wait();
      responses[k] = Infer(request);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int k = 0; k < kRequests; ++k) {
    SCOPED_TRACE(absl::StrCat("request ", k, " of shape ", ShapeToString(inputs[k].shape())));
    ASSERT_TRUE(responses[k].ok()) << responses[k].status() << shared->cluster.LogHint();
    EXPECT_EQ(responses[k]->id(), absl::StrCat("request-", k));
    absl::StatusOr<HostTensor> got =
        OutputOf(*responses[k], OutputShape(inputs[k].shape(), inputs[k].dtype(), FeaturesOf(c)));
    ASSERT_TRUE(got.ok()) << got.status();
    absl::StatusOr<HostTensor> want = ReferenceForward(reference, inputs[k]);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_TRUE(TensorsMatch(*got, *want, testing::kFloat32Rtol, testing::kFloat32Atol));
  }
  EXPECT_TRUE(m->Remove().ok());
}

INSTANTIATE_TEST_SUITE_P(Cluster, ConcurrentInferTest,
                         ::testing::Combine(::testing::Values(kMlpCase, kBlockCase, kEmbeddingCase),
                                            ::testing::Values(int64_t{0}, int64_t{8})),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param).name, "_batch",
                                               std::get<1>(info.param));
                         });

// A malformed request: how it is made from a good one, and the code and words its refusal has.
struct BadRequest {
  std::string name;
  std::function<void(inference::ModelInferRequest&)> spoil;
  absl::StatusCode code;
  std::vector<std::string> named;
};

void PrintTo(const BadRequest& b, std::ostream* os) { *os << b.name; }

// The good request the bad ones are made from: 2 rows of the MLP's [-1, 10] in FP32.
const HostTensor& GoodMlpInput() {
  static const HostTensor* const x = new HostTensor(WireInput(Wire::kFp32Raw, {2, 10}, 77));
  return *x;
}

void SetShape(inference::ModelInferRequest& r, const Shape& shape) {
  r.mutable_inputs(0)->clear_shape();
  for (int64_t d : shape) r.mutable_inputs(0)->add_shape(d);
}

const std::vector<BadRequest>& BadMlpRequests() {
  using enum absl::StatusCode;
  static const auto* const cases = new std::vector<BadRequest>{
      {"wrong_features",
       [](auto& r) {
         SetShape(r, {4, 5});
       },
       kInvalidArgument,
       {"[4, 5]", "input 'input'", "[-1, 10]"}},
      {"wrong_rank",
       [](auto& r) {
         SetShape(r, {2, 10, 1});
       },
       kInvalidArgument,
       {"[2, 10, 1]", "[-1, 10]"}},
      {"negative_size",
       [](auto& r) {
         SetShape(r, {-2, 10});
       },
       kInvalidArgument,
       {"[-2, 10]"}},
      {"wrong_input_name",
       [](auto& r) { r.mutable_inputs(0)->set_name("x"); },
       kInvalidArgument,
       {"no input 'x'", "'input'"}},
      {"integer_datatype",
       [](auto& r) { r.mutable_inputs(0)->set_datatype("INT32"); },
       kInvalidArgument,
       {"INT32", "FP32"}},
      {"unknown_datatype",
       [](auto& r) { r.mutable_inputs(0)->set_datatype("FP8"); },
       kInvalidArgument,
       {"'FP8'"}},
      {"bytes_short",
       [](auto& r) { r.mutable_raw_input_contents(0)->resize(76); },
       kInvalidArgument,
       {"76 bytes", "needs 80"}},
      {"bytes_long",
       [](auto& r) { r.mutable_raw_input_contents(0)->append("1234"); },
       kInvalidArgument,
       {"84 bytes", "needs 80"}},
      {"bytes_for_fp16",
       [](auto& r) { r.mutable_inputs(0)->set_datatype("FP16"); },
       kInvalidArgument,
       {"80 bytes", "FP16 needs 40"}},
      {"typed_count",
       [](auto& r) {
         r.clear_raw_input_contents();
         for (int i = 0; i < 19; ++i) r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
       },
       kInvalidArgument,
       {"19 fp32_contents", "needs 20"}},
      {"raw_and_typed",
       [](auto& r) { r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1); },
       kInvalidArgument,
       {"both"}},
      {"no_data",
       [](auto& r) { r.clear_raw_input_contents(); },
       kInvalidArgument,
       {"0 fp32_contents", "needs 20"}},
      {"two_inputs",
       [](auto& r) { *r.add_inputs() = r.inputs(0); },
       kInvalidArgument,
       {"one input", "has 2"}},
      {"unknown_output",
       [](auto& r) { r.add_outputs()->set_name("logits"); },
       kInvalidArgument,
       {"no output 'logits'", "'output'"}},
      {"unknown_model", [](auto& r) { r.set_model_name("nope"); }, kNotFound, {"'nope'"}},
      {"unknown_version",
       [](auto& r) { r.set_model_version("7"); },
       kNotFound,
       {"version 7", "versions: 1"}},
  };
  return *cases;
}

// (max_batch_size, bad request).
class MalformedRequestTest : public ::testing::TestWithParam<std::tuple<int64_t, BadRequest>> {
 protected:
  // One MLP published per batching setting, kept for every case of it.
  static void TearDownTestSuite() {
    for (const char* name : {"malformed_0", "malformed_8"}) {
      client::RemoveModule(S(), name).IgnoreError();
    }
  }
};

// Refused with its code and a message naming what is wrong, before anything runs; the model
// answers the good request as before, after it.
TEST_P(MalformedRequestTest, IsRefusedAndTheModelAnswersAfter) {
  const auto& [max_batch_size, bad] = GetParam();
  const std::string name = absl::StrCat("malformed_", max_batch_size);
  ReferenceModel reference;
  absl::StatusOr<ModelSpec> spec = ParseModelSpec(kMlp);
  ASSERT_TRUE(spec.ok());
  reference = testing::ReferenceOf(kMlp, RandomParameters(*spec, 9).value());
  if (!ModelReady(name)) {
    ReferenceModel loaded;
    absl::StatusOr<Module> m = LoadCase(kMlpCase, name, "grid", /*seed=*/9, &loaded);
    ASSERT_TRUE(m.ok()) << m.status() << shared->cluster.LogHint();
    ASSERT_TRUE(m->Publish({.max_batch_size = max_batch_size}).ok());
  }
  inference::ModelInferRequest request = Request(name, "", GoodMlpInput(), Wire::kFp32Raw);
  bad.spoil(request);
  EXPECT_TRUE(StatusIs(Infer(request).status(), bad.code, bad.named));
  ExpectServedMatchesReference(name, "", reference, GoodMlpInput(), Wire::kFp32Raw, 12);
}

INSTANTIATE_TEST_SUITE_P(Cluster, MalformedRequestTest,
                         ::testing::Combine(::testing::Values(int64_t{0}, int64_t{8}),
                                            ::testing::ValuesIn(BadMlpRequests())),
                         [](const auto& info) {
                           return absl::StrCat("batch", std::get<0>(info.param), "_",
                                               std::get<1>(info.param).name);
                         });

// Requests the block and the embedding model refuse: a wrong feature size or rank, a floating
// datatype for ids, more rows than max_batch_size; the models answer as before after them.
TEST(ServingTest, BlockAndEmbeddingRefuseMalformedRequests) {
  ReferenceModel block_ref, ids_ref;
  absl::StatusOr<Module> block = LoadCase(kBlockCase, "refusing_block", "tp", 13, &block_ref);
  ASSERT_TRUE(block.ok()) << block.status();
  absl::StatusOr<Module> ids = LoadCase(kEmbeddingCase, "refusing_ids", "grid", 14, &ids_ref);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_TRUE(block->Publish({.max_batch_size = 8}).ok());
  ASSERT_TRUE(ids->Publish({}).ok());
  using enum absl::StatusCode;

  const HostTensor wide = WireInput(Wire::kFp32Raw, {1, 3, 15}, 1);
  EXPECT_TRUE(StatusIs(Infer(Request("refusing_block", "", wide, Wire::kFp32Raw)).status(),
                       kInvalidArgument, {"[1, 3, 15]", "[-1, -1, 16]"}));
  const HostTensor flat = WireInput(Wire::kFp32Raw, {3, 16}, 2);
  EXPECT_TRUE(StatusIs(Infer(Request("refusing_block", "", flat, Wire::kFp32Raw)).status(),
                       kInvalidArgument, {"[3, 16]", "[-1, -1, 16]"}));
  const HostTensor nine = WireInput(Wire::kFp32Raw, {9, 2, 16}, 3);
  EXPECT_TRUE(StatusIs(Infer(Request("refusing_block", "", nine, Wire::kFp32Raw)).status(),
                       kInvalidArgument, {"9 rows", "max_batch_size 8"}));
  const HostTensor floats = WireInput(Wire::kFp32Raw, {2, 3}, 4);
  EXPECT_TRUE(StatusIs(Infer(Request("refusing_ids", "", floats, Wire::kFp32Raw)).status(),
                       kInvalidArgument, {"INT64", "not FP32"}));
  const HostTensor ids3 = WireInput(Wire::kInt64Raw, {2, 3, 1}, 5);
  EXPECT_TRUE(StatusIs(Infer(Request("refusing_ids", "", ids3, Wire::kInt64Raw)).status(),
                       kInvalidArgument, {"[2, 3, 1]", "[-1, -1]"}));

  ExpectServedMatchesReference("refusing_block", "", block_ref,
                               WireInput(Wire::kFp32Raw, {2, 4, 16}, 6), Wire::kFp32Raw, 16);
  ExpectServedMatchesReference("refusing_ids", "", ids_ref, WireInput(Wire::kInt64Raw, {2, 4}, 7),
                               Wire::kInt64Raw, 16);
  EXPECT_TRUE(block->Remove().ok());
  EXPECT_TRUE(ids->Remove().ok());
}

// Token ids out of the vocabulary are refused naming the id, without batching and with it; in a
// batch, only the request holding them fails, and the requests joined with it get their rows.
TEST(ServingTest, AnIdOutOfRangeFailsOnlyItsOwnRequest) {
  ReferenceModel reference;
  absl::StatusOr<Module> m = LoadCase(kEmbeddingCase, "out_of_range", "grid", 17, &reference);
  ASSERT_TRUE(m.ok()) << m.status();
  // Four one-row requests fill a batch; the long delay keeps them from running apart.
  ASSERT_TRUE(
      m->Publish({.version = "1", .max_batch_size = 4, .max_queue_delay = absl::Seconds(20)}).ok());
  ASSERT_TRUE(m->Publish({.version = "2"}).ok());
  for (const int64_t id : {kVocab, int64_t{-1}}) {
    HostTensor bad = WireInput(Wire::kInt64Raw, {1, 3}, 18);
    bad.data_as<int64_t>()[1] = id;
    EXPECT_TRUE(StatusIs(Infer(Request("out_of_range", "2", bad, Wire::kInt64Raw)).status(),
                         absl::StatusCode::kInvalidArgument,
                         {absl::StrCat("id ", id, " at position 1"), "outside [0, 30)"}));
  }

  constexpr int kRequests = 4;
  std::vector<HostTensor> inputs;
  for (int k = 0; k < kRequests; ++k) inputs.push_back(WireInput(Wire::kInt64Raw, {1, 3}, 40 + k));
  inputs[2].data_as<int64_t>()[2] = kVocab + 1;
  std::vector<absl::StatusOr<inference::ModelInferResponse>> responses(
      kRequests, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int k = 0; k < kRequests; ++k) {
    threads.emplace_back(
        [&, k] { responses[k] = Infer(Request("out_of_range", "1", inputs[k], Wire::kInt64Raw)); });
  }
  for (std::thread& t : threads) t.join();
  for (int k = 0; k < kRequests; ++k) {
    SCOPED_TRACE(absl::StrCat("request ", k));
    if (k == 2) {
      EXPECT_TRUE(StatusIs(responses[k].status(), absl::StatusCode::kInvalidArgument,
                           {"id 31 at position 2", "outside [0, 30)"}));
      continue;
    }
    ASSERT_TRUE(responses[k].ok()) << responses[k].status();
    absl::StatusOr<HostTensor> got = OutputOf(*responses[k], {1, 3, 16});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(TensorsMatch(*got, ReferenceForward(reference, inputs[k]).value(),
                             testing::kFloat32Rtol, testing::kFloat32Atol));
  }
  ExpectServedMatchesReference("out_of_range", "1", reference,
                               WireInput(Wire::kInt64Raw, {4, 2}, 19), Wire::kInt64Raw, 16);
  EXPECT_TRUE(m->Remove().ok());
}

// A published module serves the module as it is now: loaded whole, after parallelize_module, and
// after a training step (output.sum() backward, SGD) the served forward equals the reference's
// with the parameters of that moment.
TEST(ServingTest, APublishedModuleServesItsCurrentLayoutAndParameters) {
  const Weights params = RandomParameters(ParseModelSpec(kMlp).value(), 31).value();
  ReferenceModel reference = testing::ReferenceOf(kMlp, params);
  const std::string path = testing::WriteWeightsFile(shared->dir + "/evolving.safetensors", params);
  absl::StatusOr<Module> m =
      client::LoadModule(S(), kMlp, shared->meshes.at("grid"), "evolving", {.weights_path = path});
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(m->Publish({.max_batch_size = 8}).ok());
  const HostTensor x = WireInput(Wire::kFp32Raw, {3, 10}, 8);
  ExpectServedMatchesReference("evolving", "", reference, x, Wire::kFp32Raw, 12);
  absl::StatusOr<Module> p = client::ParallelizeModule(*m, "grid", kMlpPlan);
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectServedMatchesReference("evolving", "", reference, x, Wire::kFp32Raw, 12);
  const ReferenceModel before = testing::ReferenceOf(kMlp, params);
  testing::ExpectStepMatchesReference(*p, reference, x, /*lr=*/0.25);
  ExpectServedMatchesReference("evolving", "", reference, x, Wire::kFp32Raw, 12);
  // The step changed the output, so the comparison above tells the parameters apart.
  EXPECT_FALSE(TensorsMatch(ReferenceForward(before, x).value(),
                            ReferenceForward(reference, x).value(), 1e-3, 1e-3));
  EXPECT_TRUE(p->Remove().ok());
}

// A module removed while requests to it are in flight, with batching on and off: every request
// either gets the reference's rows or NOT_FOUND, none hangs, and afterwards the model is gone.
TEST(ServingTest, RemovingAModuleWithRequestsInFlightAnswersEachOne) {
  for (const int64_t max_batch_size : {int64_t{0}, int64_t{8}}) {
    SCOPED_TRACE(absl::StrCat("max_batch_size ", max_batch_size));
    const std::string name = absl::StrCat("busy_", max_batch_size);
    ReferenceModel reference;
    absl::StatusOr<Module> m = LoadCase(kMlpCase, name, "grid", 20, &reference);
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE(
        m->Publish({.max_batch_size = max_batch_size, .max_queue_delay = absl::Milliseconds(5)})
            .ok());
    constexpr int kThreads = 8;
    constexpr int kRequestsEach = 12;
    std::vector<std::vector<absl::StatusOr<HostTensor>>> outputs(kThreads);
    std::vector<std::vector<HostTensor>> inputs(kThreads);
    std::latch start(kThreads + 1);
    std::atomic<int> finished = 0;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        start.arrive_and_wait();
        for (int k = 0; k < kRequestsEach; ++k) {
          inputs[t].push_back(WireInput(Wire::kFp32Raw, {1 + k % 2, 10}, 1000 + t * 100 + k));
          absl::StatusOr<inference::ModelInferResponse> r =
              Infer(Request(name, "", inputs[t].back(), Wire::kFp32Raw));
          outputs[t].push_back(r.ok() ? OutputOf(*r, {1 + k % 2, 12}) : r.status());
          ++finished;
        }
      });
    }
    start.arrive_and_wait();
    // Removed once the requests are well under way.
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (finished < kThreads && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
    const absl::Status removed = m->Remove();
    for (std::thread& t : threads) t.join();
    ASSERT_TRUE(removed.ok()) << removed;
    int answered = 0;
    for (int t = 0; t < kThreads; ++t) {
      for (int k = 0; k < kRequestsEach; ++k) {
        SCOPED_TRACE(absl::StrCat("thread ", t, " request ", k));
        const absl::StatusOr<HostTensor>& got = outputs[t][k];
        if (!got.ok()) {
          EXPECT_TRUE(StatusIs(got.status(), absl::StatusCode::kNotFound, {name}));
          continue;
        }
        ++answered;
        EXPECT_TRUE(TensorsMatch(*got, ReferenceForward(reference, inputs[t][k]).value(),
                                 testing::kFloat32Rtol, testing::kFloat32Atol));
      }
    }
    EXPECT_GE(answered, kThreads);
    EXPECT_FALSE(ModelReady(name));
  }
}

// Removing a module unpublishes every version it published; deleting a mesh unpublishes the
// modules on it.
TEST(ServingTest, RemovingTheModuleOrItsMeshUnpublishes) {
  ReferenceModel reference;
  absl::StatusOr<Module> m = LoadCase(kMlpCase, "removed", "tp", 15, &reference);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(m->Publish({.version = "1"}).ok());
  ASSERT_TRUE(m->Publish({.version = "2", .max_batch_size = 4}).ok());
  ASSERT_TRUE(m->Publish({.model = "removed_alias"}).ok());
  EXPECT_TRUE(ModelReady("removed", "1"));
  EXPECT_TRUE(ModelReady("removed", "2"));
  EXPECT_TRUE(ModelReady("removed_alias"));
  ASSERT_TRUE(m->Remove().ok());
  const HostTensor x = WireInput(Wire::kFp32Raw, {1, 10}, 8);
  for (const std::string model : {"removed", "removed_alias"}) {
    EXPECT_FALSE(ModelReady(model));
    EXPECT_TRUE(StatusIs(Metadata(model).status(), absl::StatusCode::kNotFound, {model}));
    EXPECT_TRUE(StatusIs(Infer(Request(model, "", x, Wire::kFp32Raw)).status(),
                         absl::StatusCode::kNotFound, {model}));
  }

  absl::StatusOr<client::MeshInfo> mesh =
      client::InitDeviceMesh(S(), "cpu", {2}, {"tp"}, "doomed", {.worker_ids = {2, 3}});
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  shared->meshes.emplace("doomed", client::Mesh{mesh->name, mesh->mesh});
  absl::StatusOr<Module> d = LoadCase(kMlpCase, "on_doomed", "doomed", 16, &reference);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(d->Publish({.max_batch_size = 8}).ok());
  ExpectServedMatchesReference("on_doomed", "", reference, x, Wire::kFp32Raw, 12);
  ASSERT_TRUE(S().DeleteMesh("doomed").ok());
  shared->meshes.erase("doomed");
  EXPECT_FALSE(ModelReady("on_doomed"));
  EXPECT_TRUE(StatusIs(Infer(Request("on_doomed", "", x, Wire::kFp32Raw)).status(),
                       absl::StatusCode::kNotFound, {"'on_doomed'"}));
}

}  // namespace
}  // namespace tessera
