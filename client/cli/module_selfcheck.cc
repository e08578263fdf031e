#include "client/cli/module_selfcheck.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/files/safetensors.h"
#include "core/modules/module_spec.h"
#include "core/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "import/program_plan.h"
#include "import/program_weights.h"
#include "import/simulated_run.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "kernels/backend.h"
#include "reference/module_reference.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

// A pre-norm transformer block: attention and MLP sub-blocks, each added to its input.
constexpr char kBlockSpec[] = R"js({
  "type": "Module",
  "input": {"dtype": "float32", "shape": [-1, -1, 64]},
  "children": [
    {"name": "attn", "type": "Module", "residual": true, "children": [
      {"name": "norm", "type": "LayerNorm", "normalized_shape": 64},
      {"name": "attention", "type": "Attention", "dim": 64, "n_heads": 4, "causal": true}]},
    {"name": "mlp", "type": "Module", "residual": true, "children": [
      {"name": "norm", "type": "RMSNorm", "normalized_shape": 64},
      {"name": "net1", "type": "Linear", "in_features": 64, "out_features": 256},
      {"name": "act", "type": "GELU", "approximate": "tanh"},
      {"name": "net2", "type": "Linear", "in_features": 256, "out_features": 64}]}]
})js";

// Megatron's plan: q, k, v column-parallel (whole heads per rank), o row-parallel; the MLP
// column- then row-parallel.
constexpr char kBlockPlan[] = R"js({
  "mesh_dim": "tp",
  "plan": {
    "attn.attention.[qkv]": "ColwiseParallel",
    "attn.attention.o": "RowwiseParallel",
    "mlp.net1": "ColwiseParallel",
    "mlp.net2": "RowwiseParallel"
  }
})js";

constexpr double kTolerance = 1e-4;

// Largest |a - b| / max(1, |b|) over two float32 tensors of one shape; infinity otherwise.
double MaxRelativeError(const HostTensor& a, const HostTensor& b) {
  if (a.shape() != b.shape() || a.dtype() != DType::kFloat32 || b.dtype() != DType::kFloat32) {
    return INFINITY;
  }
  const float* x = reinterpret_cast<const float*>(a.data());
  const float* y = reinterpret_cast<const float*>(b.data());
  double worst = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    worst = std::max(worst, std::abs(double{x[i]} - y[i]) / std::max(1.0, std::abs(double{y[i]})));
  }
  return worst;
}

HostTensor Uniform(Shape shape, uint32_t seed) {
  HostTensor t = HostTensor::ZerosOfValidShape(DType::kFloat32, std::move(shape));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  float* p = reinterpret_cast<float*>(t.data());
  for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = dist(gen);
  return t;
}

absl::Status WriteText(const std::filesystem::path& path, absl::string_view text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadText(const std::filesystem::path& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The block through the KServe v2 endpoint, as any inference client calls it: FP32 raw input.
absl::StatusOr<HostTensor> InferOverKServe(const std::string& address, const std::string& model,
                                           const HostTensor& x, std::ostream& out) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    inference::ModelMetadataRequest request;
    request.set_name(model);
    inference::ModelMetadataResponse metadata;
    grpc::Status s = stub->ModelMetadata(&context, request, &metadata);
    if (!s.ok()) return absl::InternalError(absl::StrCat("ModelMetadata: ", s.error_message()));
    auto describe = [](const inference::ModelMetadataResponse::TensorMetadata& t) {
      std::vector<std::string> dims;
      for (int64_t d : t.shape()) dims.push_back(absl::StrCat(d));
      return absl::StrCat(t.name(), " ", t.datatype(), " [", absl::StrJoin(dims, ", "), "]");
    };
    out << "  ModelMetadata: platform " << metadata.platform() << ", input "
        << describe(metadata.inputs(0)) << ", output " << describe(metadata.outputs(0)) << "\n";
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  inference::ModelInferRequest request;
  request.set_model_name(model);
  request.set_id("selfcheck");
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  for (int64_t d : x.shape()) input->add_shape(d);
  request.add_raw_input_contents(reinterpret_cast<const char*>(x.data()), x.nbytes());
  inference::ModelInferResponse response;
  grpc::Status s = stub->ModelInfer(&context, request, &response);
  if (!s.ok()) return absl::InternalError(absl::StrCat("ModelInfer: ", s.error_message()));
  if (response.outputs_size() != 1 || response.raw_output_contents_size() != 1) {
    return absl::InternalError("ModelInfer gave no raw output");
  }
  Shape shape(response.outputs(0).shape().begin(), response.outputs(0).shape().end());
  ASSIGN_OR_RETURN(HostTensor y, HostTensor::Zeros(DType::kFloat32, shape));
  const std::string& raw = response.raw_output_contents(0);
  if (raw.size() != y.nbytes()) return absl::InternalError("ModelInfer's output has a wrong size");
  std::memcpy(y.data(), raw.data(), raw.size());
  return y;
}

// The files a user brings: a spec, a plan, and weights under torch's state_dict names; returns
// the reference model with those weights.
absl::StatusOr<ReferenceModel> WriteBlockFiles(const std::filesystem::path& spec_path,
                                               const std::filesystem::path& plan_path,
                                               const std::filesystem::path& weights_path) {
  RETURN_IF_ERROR(WriteText(spec_path, kBlockSpec));
  RETURN_IF_ERROR(WriteText(plan_path, kBlockPlan));
  ASSIGN_OR_RETURN(ModelSpec spec, ParseModelSpec(kBlockSpec));
  ASSIGN_OR_RETURN(auto params, RandomParameters(spec, 7));
  SafetensorsFile weights;
  for (auto& [name, tensor] : params) weights.tensors.emplace(name, tensor.Clone());
  RETURN_IF_ERROR(WriteSafetensorsFile(weights_path.string(), weights));
  return ReferenceModel{spec, std::move(params)};
}

// The block loaded from the files onto a new 4-worker mesh 'serve' and parallelized by the plan,
// with the parameters the plan shards shown.
absl::StatusOr<client::Module> LoadBlock(client::Session& s, const std::string& device,
                                         const std::filesystem::path& spec_path,
                                         const std::filesystem::path& plan_path,
                                         const std::filesystem::path& weights_path,
                                         std::ostream& out) {
  (void)client::RemoveModule(s, "block");  // left over from an interrupted run, if any
  (void)s.DeleteMesh("serve");
  ASSIGN_OR_RETURN(client::MeshInfo mesh, client::InitDeviceMesh(s, device, {4}, {"tp"}, "serve"));
  ASSIGN_OR_RETURN(std::string spec_json, ReadText(spec_path));
  ASSIGN_OR_RETURN(std::string plan_json, ReadText(plan_path));
  out << "Tensor parallelism on mesh 'serve' (4 workers, dim tp):\n";
  out << "  tessera module load " << spec_path.string() << " --weights " << weights_path.string()
      << " --mesh serve --name block\n";
  ASSIGN_OR_RETURN(
      client::Module loaded,
      client::LoadModule(s, spec_json, mesh, "block", {.weights_path = weights_path.string()}));
  out << "  tessera module parallelize block --plan " << plan_path.string() << "\n";
  ASSIGN_OR_RETURN(client::Module block, client::ParallelizeModule(loaded, "tp", plan_json));
  for (const client::ModuleParameter& p : block.info().parameters) {
    if (p.fqn.find("attention.q.") == std::string::npos &&
        p.fqn.find("attention.o.") == std::string::npos && p.fqn.find("net") == std::string::npos) {
      continue;
    }
    out << absl::StrFormat("    %-26s %-12s %s, rank 0 holds %s\n", p.fqn,
                           ShapeToString(p.spec.shape), PlacementsToString(p.spec.placements),
                           ShapeToString(p.shards[0].shape));
  }
  out << absl::StrFormat("    compiled forward: %d steps per rank, one command per worker\n",
                         block.info().program_steps);
  return block;
}

// Prints how far `got` is from `want`; a failure in `failures` past kTolerance.
void Check(const std::string& what, const HostTensor& got, const HostTensor& want,
           std::vector<std::string>& failures, std::ostream& out) {
  const double err = MaxRelativeError(got, want);
  out << absl::StrFormat("  %-44s %-12s max rel err %.1e\n", what, ShapeToString(got.shape()), err);
  if (!(err <= kTolerance)) failures.push_back(absl::StrCat(what, ": max rel err ", err));
}

// Forward through the client.
absl::Status CheckForward(const client::Module& block, const ReferenceModel& reference,
                          const HostTensor& x, std::vector<std::string>& failures,
                          std::ostream& out) {
  ASSIGN_OR_RETURN(HostTensor want, ReferenceForward(reference, x));
  const auto forward_start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(client::ModuleOutput y, block.Forward(x));
  const double forward_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - forward_start)
          .count();
  Check(absl::StrFormat("forward, batch 4 (%.1f ms)", forward_ms), *y.full, want, failures, out);
  return absl::OkStatus();
}

// Served: the KServe v2 endpoint on the coordinator's port, with dynamic batching.
absl::Status CheckServed(const client::Module& block, const ReferenceModel& reference,
                         const std::string& address, std::vector<std::string>& failures,
                         std::ostream& out) {
  out << "  tessera module publish block --max-batch-size 8\n";
  ASSIGN_OR_RETURN(
      client::PublishedVersion published,
      block.Publish({.max_batch_size = 8, .max_queue_delay = absl::Microseconds(500)}));
  const HostTensor one = Uniform({1, 16, 64}, 12);
  ASSIGN_OR_RETURN(HostTensor want_one, ReferenceForward(reference, one));
  ASSIGN_OR_RETURN(HostTensor served, InferOverKServe(address, published.model, one, out));
  Check("ModelInfer over KServe v2, batch 1", served, want_one, failures, out);
  return absl::OkStatus();
}

// One training step: loss = output.sum(), SGD lr 0.25; every parameter after it.
absl::Status CheckSgdStep(const client::Module& block, ReferenceModel& reference,
                          const HostTensor& x, std::vector<std::string>& failures,
                          std::ostream& out) {
  ASSIGN_OR_RETURN(ReferenceStep ref_step, ReferenceBackward(reference, x, nullptr));
  std::map<std::string, HostTensor> momentum;
  RETURN_IF_ERROR(ReferenceSgd(reference, ref_step.grads, {.lr = 0.25}, momentum));
  ASSIGN_OR_RETURN(client::StepResult step, block.Step(x, {.sgd = client::SgdOptions{.lr = 0.25}}));
  (void)step;
  ASSIGN_OR_RETURN(auto state, block.StateDict());
  double worst = 0;
  for (const auto& [name, tensor] : state) {
    worst = std::max(worst, MaxRelativeError(tensor, reference.params.at(name)));
  }
  out << absl::StrFormat("  %-44s %-12s max rel err %.1e\n", "SGD step (lr 0.25), every parameter",
                         absl::StrCat(state.size(), " tensors"), worst);
  if (!(worst <= kTolerance)) failures.push_back(absl::StrCat("SGD step: max rel err ", worst));
  return absl::OkStatus();
}

}  // namespace

absl::Status RunModuleSelfcheck(const std::string& address, const std::string& workdir,
                                const std::string& device, std::ostream& out) {
  const auto start = std::chrono::steady_clock::now();
  const std::filesystem::path dir(workdir);
  std::filesystem::create_directories(dir);
  const std::filesystem::path spec_path = dir / "block.json";
  const std::filesystem::path plan_path = dir / "block_plan.json";
  const std::filesystem::path weights_path = dir / "block.safetensors";
  ASSIGN_OR_RETURN(ReferenceModel reference, WriteBlockFiles(spec_path, plan_path, weights_path));

  ASSIGN_OR_RETURN(std::shared_ptr<client::Session> session, client::Session::Connect(address));
  client::Session& s = *session;
  ASSIGN_OR_RETURN(client::Module block,
                   LoadBlock(s, device, spec_path, plan_path, weights_path, out));

  std::vector<std::string> failures;
  const HostTensor x = Uniform({4, 16, 64}, 11);
  RETURN_IF_ERROR(CheckForward(block, reference, x, failures, out));
  RETURN_IF_ERROR(CheckServed(block, reference, address, failures, out));
  RETURN_IF_ERROR(CheckSgdStep(block, reference, x, failures, out));

  (void)block.Remove();
  (void)s.DeleteMesh("serve");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!failures.empty()) {
    return absl::InternalError(absl::StrCat("module self-check failed: ", failures[0]));
  }
  out << absl::StrFormat("Module self-check passed in %.2f s\n", seconds);
  return absl::OkStatus();
}

absl::Status RunImportSelfcheck(const std::string& address, const ImportSelfcheck& model,
                                const std::string& device, std::ostream& out) {
  const auto start = std::chrono::steady_clock::now();
  out << "A model from PyTorch: " << model.archive << "\n";
  ASSIGN_OR_RETURN(const import::ProgramWeights weights,
                   import::ProgramWeights::Open(model.archive, model.weights));
  ASSIGN_OR_RETURN(SafetensorsFile io, ReadSafetensorsFile(model.inputs));
  const import::ExportedProgram& program = weights.program();
  // The reference: the program in one process, on the same weights.
  std::vector<HostTensor> values;
  std::vector<HostTensor> inputs;
  size_t next_weight = 0;
  for (size_t i = 0; i < program.inputs.size(); ++i) {
    const import::ProgramInput& in = program.inputs[i];
    if (in.kind == import::InputKind::kUserInput) {
      auto it = io.tensors.find(in.name);
      if (it == io.tensors.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(model.inputs, " has no tensor '", in.name, "' for the program's input"));
      }
      values.push_back(it->second.Clone());
      inputs.push_back(it->second.Clone());
      continue;
    }
    ASSIGN_OR_RETURN(HostTensor t, weights.Read(weights.weights()[next_weight++]));
    values.push_back(std::move(t));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::KernelBackend> backend, kernels::MakeBackend("cpu"));
  ASSIGN_OR_RETURN(const DeviceMesh one, DeviceMesh::Create("cpu", {1}));
  ops::ShardingCache cache;
  ASSIGN_OR_RETURN(const import::PlannedProgram single,
                   import::PlanExportedProgram(program, one, {}, cache));
  ASSIGN_OR_RETURN(const import::SimulatedRun reference,
                   import::RunOnSimulatedMesh(*backend, program, single, values));

  ASSIGN_OR_RETURN(std::shared_ptr<client::Session> session, client::Session::Connect(address));
  client::Session& s = *session;
  ASSIGN_OR_RETURN(client::MeshInfo mesh,
                   client::InitDeviceMesh(s, device, {4}, {"tp"}, "imported"));
  client::LoadExportedOptions options;
  if (!model.tp_plan.empty()) {
    ASSIGN_OR_RETURN(options.tp_plan_json, ReadText(model.tp_plan));
  }
  options.checkpoint_dir = model.weights;
  out << "  tessera module load " << std::filesystem::path(model.archive).filename().string()
      << " --mesh imported" << (model.tp_plan.empty() ? "" : " --tp-plan ...")
      << (model.weights.empty() ? "" : " --weights ...") << "\n";
  ASSIGN_OR_RETURN(client::Module m,
                   client::LoadExported(s, model.archive, client::Mesh{mesh.name, mesh.mesh},
                                        "imported", options));
  const client::ImportedInfo& info = *m.info().imported;
  out << absl::StrFormat(
      "    %d nodes of registered ops, %d parameters, buffers and constants; %d modules styled; "
      "one forward: %d steps per rank, %d collectives, one command per worker\n",
      info.nodes, m.info().parameters.size(), info.styled.size(), m.info().program_steps,
      info.collectives);
  const auto forward_start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::vector<HostTensor> outputs, m.ForwardMany(inputs));
  const double forward_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - forward_start)
          .count();
  std::vector<std::string> failures;
  Check(absl::StrFormat("forward on 4 workers (%.1f ms) vs one process", forward_ms), outputs[0],
        reference.outputs[0], failures, out);
  if (auto it = io.tensors.find("logits"); it != io.tensors.end()) {
    Check("forward vs the model's own logits", outputs[0], it->second, failures, out);
  }
  (void)m.Remove();
  (void)s.DeleteMesh("imported");
  if (!failures.empty()) {
    return absl::InternalError(absl::StrCat("import self-check failed: ", failures[0]));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out << absl::StrFormat("Import self-check passed in %.2f s\n", seconds);
  return absl::OkStatus();
}

}  // namespace tessera
