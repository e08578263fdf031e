#include "server/modules/module_loader.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/modules/parallel_plan.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "server/transfers/shard_streams.h"
#include "transfer/tensor_stream.h"

namespace tessera {
namespace {

// OK iff the program holds exactly the spec's parameters, with their shapes.
absl::Status CheckProgramParameters(const std::vector<ParameterInfo>& expected,
                                    const Program& program) {
  std::set<std::pair<std::string, Shape>> want, got;
  for (const ParameterInfo& p : expected) want.emplace(p.fqn, p.shape);
  for (const ProgramParameter& p : program.parameters) got.emplace(p.fqn, p.shape);
  if (want == got && program.parameters.size() == expected.size()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("the compiled program holds ", program.parameters.size(),
                                          " parameters, the spec ", expected.size(),
                                          ", and they differ"));
}

// Each parameter's fill under a seed, by FQN (NamedModules and OwnParameters name them as
// NamedParameters does).
std::map<std::string, ParameterInit> SeedInits(const ModuleSpec& root) {
  std::map<std::string, ParameterInit> inits;
  for (const auto& [prefix, module] : NamedModules(root)) {
    for (const ParameterInfo& own : OwnParameters(*module)) {
      inits[prefix.empty() ? own.fqn : absl::StrCat(prefix, ".", own.fqn)] =
          InitOf(*module, own.fqn);
    }
  }
  return inits;
}

// OK iff `weights` are exactly the program's parameters, buffers and constants, each with the
// dtype and shape the program records; INVALID_ARGUMENT naming the first that is missing, extra,
// given twice or of another dtype or shape.
absl::Status CheckGraphWeights(const ModuleGraph& graph, const std::vector<WeightsTensor>& weights,
                               const std::string& module) {
  std::map<std::string, int> wanted;  // state_dict name -> program input
  for (int i : graph.weights) wanted[graph.program.inputs[i].target] = i;
  std::set<std::string> given;
  for (const WeightsTensor& w : weights) {
    auto it = wanted.find(w.name);
    if (it == wanted.end()) {
      return absl::InvalidArgumentError(absl::StrCat("weights tensor '", w.name,
                                                     "' is no parameter, buffer or constant of ",
                                                     "module '", module, "'s program"));
    }
    if (!given.insert(w.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("weights tensor '", w.name, "' is given twice"));
    }
    const import::ProgramInput& in = graph.program.inputs[it->second];
    const ops::TensorMeta& meta = graph.program.value_metas[it->second];
    if (w.dtype != meta.dtype || w.shape != meta.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weights tensor '", w.name, "' is ", DTypeName(w.dtype), ShapeToString(w.shape), "; ",
          import::InputKindName(in.kind), " '", w.name, "' of module '", module, "' is ",
          DTypeName(meta.dtype), ShapeToString(meta.shape)));
    }
  }
  for (const auto& [name, i] : wanted) {
    if (!given.contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the weights lack ", import::InputKindName(graph.program.inputs[i].kind), " '", name,
          "' of module '", module, "' (", given.size(), " of ", wanted.size(), " given)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::ModuleInfo> ModuleLoader::Load(
    const grpc::ServerContext& context, grpc::ServerReaderInterface<v1::LoadModuleChunk>* reader) {
  v1::LoadModuleChunk chunk;
  if (!reader->Read(&chunk)) return absl::InvalidArgumentError("LoadModule stream had no chunks");
  if (!chunk.has_header()) {
    return absl::InvalidArgumentError("the first LoadModule chunk must carry the header");
  }
  const v1::LoadModuleHeader header = chunk.header();
  RETURN_IF_ERROR(ModuleTable::CheckName(header.name()));
  if (header.init_case() == v1::LoadModuleHeader::INIT_NOT_SET) {
    return absl::InvalidArgumentError(
        absl::StrCat("module '", header.name(),
                     "' needs a seed, weights or a checkpoint; the header gives none"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Mesh> mesh, tensors_->meshes().Find(header.mesh()));
  RETURN_IF_ERROR(programs_->MeshReady(*mesh));
  if (header.has_program()) {
    return LoadImported(reader, chunk, std::move(mesh), TransferDeadline(context));
  }
  absl::StatusOr<ModelSpec> spec = ParseModelSpec(header.spec_json());
  if (!spec.ok()) return WithContext("module spec", spec.status());
  PlanSpec plan;
  if (!header.plan_json().empty()) {
    absl::StatusOr<PlanSpec> parsed = ParsePlanSpec(header.plan_json());
    if (!parsed.ok()) return WithContext("plan", parsed.status());
    plan = *std::move(parsed);
  }
  ASSIGN_OR_RETURN(CompiledPlan compiled,
                   ModulePrograms::Compile(*spec, std::move(plan), mesh->mesh));
  RETURN_IF_ERROR(modules_->Reserve(header.name()));
  auto module = std::make_shared<ModuleEntry>(header.name(), mesh, *spec, ModelSpecToJson(*spec),
                                              modules_->NextProgramId());
  bool program_posted = false;
  const absl::Status filled =
      Fill(reader, chunk, *module, std::move(compiled), TransferDeadline(context), program_posted);
  return Enter(std::move(module), filled, program_posted);
}

absl::StatusOr<v1::ModuleInfo> ModuleLoader::Enter(std::shared_ptr<ModuleEntry> module,
                                                   absl::Status filled, bool program_posted) {
  if (filled.ok()) {
    absl::ReaderMutexLock lock(&module->mu);
    filled = modules_->Persist(*module);
  }
  if (!filled.ok()) {
    Discard(*module, program_posted);
    modules_->Unreserve(module->name);
    return filled;
  }
  modules_->Commit(module);
  return ModuleTable::Describe(*module);
}

absl::StatusOr<v1::ModuleInfo> ModuleLoader::LoadImported(
    grpc::ServerReaderInterface<v1::LoadModuleChunk>* reader, v1::LoadModuleChunk& chunk,
    std::shared_ptr<Mesh> mesh, absl::Time deadline) {
  const v1::LoadModuleHeader header = chunk.header();
  if (!header.spec_json().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "module '", header.name(), "': the header gives a spec and a program; give one"));
  }
  if (!header.weights_follow()) {
    return absl::InvalidArgumentError(
        absl::StrCat("module '", header.name(),
                     "' is a program: its weights follow it (weights_follow); a seed or a "
                     "checkpoint does not fill one"));
  }
  RETURN_IF_ERROR(modules_->Reserve(header.name()));
  const int64_t program_id = modules_->NextProgramId();
  absl::StatusOr<std::shared_ptr<const ModuleGraph>> graph = BuildModuleGraph(
      header.program(), header.plan_json(), mesh->mesh, mesh->id, header.name(), program_id);
  absl::StatusOr<std::vector<WeightsTensor>> weights;
  if (graph.ok()) weights = ReadWeightsHeader(reader, chunk);
  absl::Status checked = !graph.ok() ? graph.status() : weights.status();
  if (checked.ok()) checked = CheckGraphWeights(**graph, *weights, header.name());
  if (!checked.ok()) {
    modules_->Unreserve(header.name());
    return checked;
  }
  auto module = std::make_shared<ModuleEntry>(header.name(), mesh, *std::move(graph), program_id);
  bool program_posted = false;
  const absl::Status filled =
      FillImported(reader, chunk, *module, *weights, deadline, program_posted);
  return Enter(std::move(module), filled, program_posted);
}

absl::Status ModuleLoader::FillImported(grpc::ServerReaderInterface<v1::LoadModuleChunk>* reader,
                                        v1::LoadModuleChunk& chunk, ModuleEntry& module,
                                        const std::vector<WeightsTensor>& weights,
                                        absl::Time deadline, bool& program_posted) {
  const ModuleGraph& graph = *module.graph;
  absl::MutexLock lock(&module.mu);
  module.plan_json = chunk.header().plan_json();
  module.program.parameters = GraphParameters(graph);
  std::map<std::string, std::shared_ptr<DTensorEntry>> by_fqn;
  for (int i : graph.weights) {
    const std::string& fqn = graph.program.inputs[i].target;
    ASSIGN_OR_RETURN(std::shared_ptr<DTensorEntry> t,
                     tensors_->Add(ParameterTensorName(module.name, fqn), module.mesh,
                                   graph.planned.values[i], ModuleOwner(module.name)));
    module.parameters.push_back(t);
    by_fqn[fqn] = std::move(t);
  }
  RETURN_IF_ERROR(StreamWeights(reader, chunk, weights, by_fqn, deadline));
  program_posted = true;
  RETURN_IF_ERROR(programs_->Install(module, module.program, deadline));
  return DTensorTable::AwaitWrites(module.parameters, deadline);
}

absl::Status ModuleLoader::Fill(grpc::ServerReaderInterface<v1::LoadModuleChunk>* reader,
                                v1::LoadModuleChunk& chunk, ModuleEntry& module,
                                CompiledPlan compiled, absl::Time deadline, bool& program_posted) {
  const v1::LoadModuleHeader header = chunk.header();
  RETURN_IF_ERROR(CheckProgramParameters(NamedParameters(module.spec.root), compiled.program));
  std::vector<WeightsTensor> weights;
  if (header.weights_follow()) {
    ASSIGN_OR_RETURN(weights, ReadWeightsHeader(reader, chunk));
    RETURN_IF_ERROR(CheckWeights(NamedParameters(module.spec.root), weights, module.dtype));
  }
  absl::MutexLock lock(&module.mu);
  module.plan_json = std::move(compiled.plan_json);
  module.program = std::move(compiled.program);
  std::map<std::string, std::shared_ptr<DTensorEntry>> by_fqn;
  for (const ProgramParameter& p : module.program.parameters) {
    ASSIGN_OR_RETURN(DTensorSpec spec,
                     MakeDTensorSpec(module.mesh->mesh, p.placements, p.shape, module.dtype));
    ASSIGN_OR_RETURN(std::shared_ptr<DTensorEntry> t,
                     tensors_->Add(ParameterTensorName(module.name, p.fqn), module.mesh,
                                   std::move(spec), ModuleOwner(module.name)));
    module.parameters.push_back(t);
    by_fqn[p.fqn] = std::move(t);
  }
  if (header.weights_follow()) {
    RETURN_IF_ERROR(StreamWeights(reader, chunk, weights, by_fqn, deadline));
  } else {
    if (reader->Read(&chunk)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "module '", module.name, "' is made from a ",
          header.has_checkpoint() ? "checkpoint" : "seed", "; its stream carries nothing more"));
    }
    RETURN_IF_ERROR(header.has_checkpoint()
                        ? FillFromCheckpoint(module, header.checkpoint(), deadline)
                        : FillFromSeed(module, header.seed()));
  }
  program_posted = true;
  RETURN_IF_ERROR(programs_->Install(module, module.program, deadline));
  return DTensorTable::AwaitWrites(module.parameters, deadline);
}

absl::StatusOr<std::vector<WeightsTensor>> ModuleLoader::ReadWeightsHeader(
    grpc::ServerReaderInterface<v1::LoadModuleChunk>* reader, v1::LoadModuleChunk& chunk) {
  if (!chunk.has_weights() && (!reader->Read(&chunk) || !chunk.has_weights())) {
    return absl::InvalidArgumentError(
        "the weights' header must come with the LoadModule header or on the next chunk");
  }
  std::vector<WeightsTensor> weights;
  for (const v1::WeightsEntry& w : chunk.weights().tensors()) {
    absl::StatusOr<DType> dtype = FromProto(w.dtype());
    if (!dtype.ok())
      return WithContext(absl::StrCat("weights tensor '", w.name(), "'"), dtype.status());
    absl::StatusOr<Shape> shape = FromProto(w.shape());
    if (!shape.ok())
      return WithContext(absl::StrCat("weights tensor '", w.name(), "'"), shape.status());
    weights.push_back({w.name(), *dtype, *std::move(shape)});
  }
  return weights;
}

absl::Status ModuleLoader::FillFromSeed(const ModuleEntry& module, uint64_t seed) {
  const std::map<std::string, ParameterInit> inits = SeedInits(module.spec.root);
  for (size_t i = 0; i < module.parameters.size(); ++i) {
    const DTensorEntry& t = *module.parameters[i];
    auto it = inits.find(module.program.parameters[i].fqn);
    const ParameterInit init = it == inits.end() ? ParameterInit{} : it->second;
    v1::Command command;
    v1::FillTensor* fill = command.mutable_fill_tensor();
    fill->set_mesh_id(module.mesh->id);
    fill->set_output(DTensorTable::WorkerName(t.name));
    *fill->mutable_spec() = ToProto(t.spec);
    // Parameter i draws from seed + i: each its own stream, all fixed by the one seed.
    fill->set_seed(seed + i);
    switch (init.kind) {
      case ParameterInit::Kind::kUniform:
        fill->set_factory(v1::RAND);
        fill->set_low(-init.bound);
        fill->set_high(init.bound);
        break;
      case ParameterInit::Kind::kNormal:
        fill->set_factory(v1::RANDN);
        break;
      case ParameterInit::Kind::kOnes:
        fill->set_factory(v1::ONES);
        break;
      case ParameterInit::Kind::kZeros:
        fill->set_factory(v1::ZEROS);
        break;
    }
    RETURN_IF_ERROR(tensors_->PostWrite(t, command));
  }
  return absl::OkStatus();
}

absl::Status ModuleLoader::FillFromCheckpoint(const ModuleEntry& module, const std::string& path,
                                              absl::Time deadline) {
  ASSIGN_OR_RETURN(const Checkpoints::Index index,
                   checkpoints_->ReadIndex(path, *module.mesh, deadline));
  std::map<std::string, const CheckpointTensor*> saved;
  for (const CheckpointTensor& t : index.parsed.tensors) saved[t.name] = &t;
  for (size_t i = 0; i < module.parameters.size(); ++i) {
    const std::string& fqn = module.program.parameters[i].fqn;
    const DTensorEntry& p = *module.parameters[i];
    auto it = saved.find(fqn);
    if (it == saved.end()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " has no tensor '", fqn,
                                                     "' for parameter '", fqn, "' of module '",
                                                     module.name, "'"));
    }
    const CheckpointTensor& t = *it->second;
    if (t.shape != p.spec.shape || t.dtype != p.spec.dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", path, " holds '", fqn, "' as ", DTypeName(t.dtype),
                       ShapeToString(t.shape), "; module '", module.name, "' needs ",
                       DTypeName(p.spec.dtype), ShapeToString(p.spec.shape)));
    }
  }
  for (size_t i = 0; i < module.parameters.size(); ++i) {
    RETURN_IF_ERROR(checkpoints_->PostLoad(*module.parameters[i], path, index,
                                           module.program.parameters[i].fqn));
  }
  return absl::OkStatus();
}

absl::Status ModuleLoader::StreamWeights(
    grpc::ServerReaderInterface<v1::LoadModuleChunk>* reader, v1::LoadModuleChunk& chunk,
    const std::vector<WeightsTensor>& order,
    const std::map<std::string, std::shared_ptr<DTensorEntry>>& entries, absl::Time deadline) {
  size_t index = 0;  // the tensor whose bytes come next
  std::unique_ptr<ShardScatter> scatter;
  std::string pending = std::move(*chunk.mutable_data());
  while (true) {
    while (!pending.empty()) {
      if (index >= order.size()) {
        return absl::InvalidArgumentError(
            "the stream sent more bytes than the weights' tensors hold");
      }
      const DTensorEntry& t = *entries.at(order[index].name);
      const std::vector<int64_t> origin(t.spec.mesh.ndim(), 0);
      if (scatter == nullptr) {
        ASSIGN_OR_RETURN(scatter, ShardScatter::Open(tensors_->dispatcher(), t.spec,
                                                     BlockHolders(t.spec, origin),
                                                     DTensorTable::WorkerName(t.name), deadline));
      }
      const size_t room =
          static_cast<size_t>(scatter->expected_bytes() - scatter->received_bytes());
      std::string piece;
      if (pending.size() <= room) {
        piece = std::move(pending);
        pending.clear();
      } else {
        piece = pending.substr(0, room);
        pending.erase(0, room);
      }
      RETURN_IF_ERROR(scatter->Write(std::move(piece)));
      if (scatter->received_bytes() < scatter->expected_bytes()) continue;
      const absl::Status finished = scatter->Finish();
      scatter.reset();
      if (!finished.ok())
        return WithContext(absl::StrCat("parameter '", order[index].name, "'"), finished);
      RETURN_IF_ERROR(streams_->Spread(t, origin, ReplicaDims(t.spec), /*partition=*/true));
      ++index;
    }
    if (!reader->Read(&chunk)) break;
    if (chunk.has_header() || chunk.has_weights()) {
      return absl::InvalidArgumentError(
          "a LoadModule chunk after the weights' header carries a header again");
    }
    pending = std::move(*chunk.mutable_data());
  }
  if (index < order.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the stream ended in the bytes of weights tensor '", order[index].name, "' (",
                     index, " of ", order.size(), " tensors complete)"));
  }
  return absl::OkStatus();
}

void ModuleLoader::Discard(ModuleEntry& module, bool program_posted) {
  absl::MutexLock lock(&module.mu);
  if (program_posted) programs_->Drop(module);
  for (const auto& t : module.parameters) tensors_->Release(*t);
  module.parameters.clear();
}

}  // namespace tessera
