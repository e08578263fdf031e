#include "client/cli/module_commands.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <span>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/cli_session.h"
#include "client/cli/progress_bar.h"
#include "client/cli/tensor_files.h"
#include "core/files/file_bytes.h"
#include "core/files/safetensors.h"
#include "core/json.h"
#include "core/status_macros.h"
#include "import/hf_checkpoint.h"
#include "tessera/tessera.h"

namespace tessera::cli {
namespace {

// The whole text of the file at `path`.
absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<std::byte> bytes, ReadFileBytes(path));
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// "tp" for a named mesh dim, else its index.
std::string MeshDimLabel(const DeviceMesh& mesh, int dim) {
  if (dim >= 0 && dim < static_cast<int>(mesh.dim_names().size())) return mesh.dim_names()[dim];
  return absl::StrCat(dim);
}

// "R on mesh dim tp, a DTensor": how the ranks' local tensors at an edge make the full one.
std::string EdgeText(const client::EdgeLayoutInfo& edge, const std::string& dim) {
  return absl::StrCat(PlacementToString(edge.placement), " on mesh dim ", dim,
                      edge.is_dtensor ? ", a DTensor" : ", local tensors");
}

// The plan, a line per pattern ("    net1: {...}"), as the plan file's "plan" or "distribute"
// object orders them; the text as it is if it is not such a file.
void PrintPlan(const std::string& plan_json, std::ostream& out) {
  if (plan_json.empty()) {
    out << "  plan: none (every parameter Replicate)\n";
    return;
  }
  absl::StatusOr<nlohmann::ordered_json> plan = ParseOrderedJson(plan_json);
  std::string key;
  if (plan.ok() && plan->is_object()) {
    for (const char* k : {"plan", "distribute"}) {
      if (plan->contains(k) && (*plan)[k].is_object()) key = k;
    }
  }
  if (key.empty()) {
    out << "  plan: " << absl::StripTrailingAsciiWhitespace(plan_json) << "\n";
    return;
  }
  out << "  plan (" << (key == "plan" ? "parallelize_module" : "distribute_module") << "):\n";
  for (const auto& [pattern, style] : (*plan)[key].items()) {
    absl::StatusOr<std::string> text = DumpJson(style);
    out << "    " << (pattern.empty() ? "\"\" (the root)" : pattern) << ": "
        << (text.ok() ? *text : text.status().ToString()) << "\n";
  }
}

// "rank 3" on a 1-D mesh, "rank 3 (1, 0)" on an N-D one: the rank at mesh index `index`.
std::string RankLabel(const DeviceMesh& mesh, int64_t index) {
  std::string label = absl::StrCat("rank ", mesh.ranks()[index]);
  if (mesh.ndim() > 1) {
    absl::StrAppend(&label, " (", absl::StrJoin(mesh.CoordinateOfIndex(index), ", "), ")");
  }
  return label;
}

int64_t ParameterBytes(const client::ModuleInfo& m) {
  int64_t bytes = 0;
  for (const client::ModuleParameter& p : m.parameters) {
    bytes += NumElements(p.spec.shape) * static_cast<int64_t>(DTypeSize(p.spec.dtype));
  }
  return bytes;
}

std::string PublishedText(const client::PublishedVersion& p) {
  return absl::StrFormat("%s version %s (max batch size %d, max queue delay %d us)", p.model,
                         p.version, p.max_batch_size, absl::ToInt64Microseconds(p.max_queue_delay));
}

// One line per module, as `list` prints them.
void PrintSummary(const client::ModuleInfo& m, std::ostream& out) {
  std::vector<std::string> published;
  for (const client::PublishedVersion& p : m.published) {
    published.push_back(absl::StrCat(p.model, "/", p.version));
  }
  const bool planned =
      !m.plan_json.empty() || (m.imported.has_value() && !m.imported->tp_plan_json.empty());
  out << absl::StrFormat(
      "%-16s mesh %-10s %3d parameters %10d B  %-7s  published: %s%s\n", m.name, m.mesh,
      m.parameters.size(), ParameterBytes(m), planned ? "plan" : "no plan",
      published.empty() ? "none" : absl::StrJoin(published, ", "),
      m.imported.has_value() ? absl::StrCat("  program ", m.imported->source) : "");
}

// One line per parameter with its placements, and each rank's local shape and offset.
void PrintParameters(const client::ModuleInfo& m, std::ostream& out) {
  out << "  parameters:\n";
  for (const client::ModuleParameter& p : m.parameters) {
    out << absl::StrFormat("    %-20s %s%s %s  tensor %s%s\n", p.fqn, DTypeName(p.spec.dtype),
                           ShapeToString(p.spec.shape), PlacementsToString(p.spec.placements),
                           p.tensor, p.grad.empty() ? "" : absl::StrCat("  grad ", p.grad));
    for (size_t i = 0; i < p.shards.size(); ++i) {
      out << absl::StrFormat("      %-12s local %s at offset %s\n",
                             RankLabel(p.spec.mesh, static_cast<int64_t>(i)) + ":",
                             ShapeToString(p.shards[i].shape), ShapeToString(p.shards[i].offset));
    }
  }
}

// What `show` prints of a module imported from a program: its edges, its plan and the modules it
// styled, then its parameters.
void PrintImported(const client::ModuleInfo& m, const client::ImportedInfo& p, std::ostream& out) {
  out << absl::StrFormat("  program %s: %d nodes; a forward runs %d collectives\n", p.source,
                         p.nodes, p.collectives);
  for (const auto& [label, edges] :
       {std::pair{"input ", &p.inputs}, std::pair{"output", &p.outputs}}) {
    for (const client::ProgramEdgeInfo& e : *edges) {
      out << absl::StrFormat("  %s %-16s %s%s %s\n", label, e.name, DTypeName(e.spec.dtype),
                             ShapeToString(e.spec.shape), PlacementsToString(e.spec.placements));
    }
  }
  if (!p.tp_plan_json.empty()) {
    out << "  tp_plan: " << absl::StripTrailingAsciiWhitespace(p.tp_plan_json) << "\n";
  } else {
    PrintPlan(m.plan_json, out);
  }
  for (const std::string& s : p.styled) out << "    styled " << s << "\n";
  PrintParameters(m, out);
}

// Everything `show` prints: edges, plan, unmatched patterns, published versions, and every
// parameter with its placements and each rank's local shape and offset.
void PrintModule(const client::ModuleInfo& m, std::ostream& out) {
  out << absl::StrFormat("module %s on mesh %s: %d parameters (%d B), a forward of %d steps\n",
                         m.name, m.mesh, m.parameters.size(), ParameterBytes(m), m.program_steps);
  if (m.imported.has_value()) {
    PrintImported(m, *m.imported, out);
    return;
  }
  // The mesh the parameters are on names its dims; a module without parameters shows indices.
  const std::optional<DeviceMesh> mesh =
      m.parameters.empty() ? std::nullopt : std::optional<DeviceMesh>(m.parameters[0].spec.mesh);
  const std::string tp =
      mesh.has_value() ? MeshDimLabel(*mesh, m.tp_mesh_dim) : absl::StrCat(m.tp_mesh_dim);
  out << absl::StrFormat("  input:  %s%s, %s\n", DTypeName(m.input_dtype),
                         ShapeToString(m.input_shape), EdgeText(m.input_layout, tp));
  out << absl::StrFormat("  output: %s[..., %d], %s\n", DTypeName(m.output_dtype),
                         m.output_features, EdgeText(m.output_layout, tp));
  if (mesh.has_value() && mesh->ndim() > 1) {
    out << "  the other mesh dims are data parallel: they split the batch (dim 0)\n";
  }
  PrintPlan(m.plan_json, out);
  if (!m.unmatched.empty()) {
    out << "  unmatched plan patterns (they match no module): " << absl::StrJoin(m.unmatched, ", ")
        << "\n";
  }
  for (const client::PublishedVersion& p : m.published) {
    out << "  published: " << PublishedText(p) << "\n";
  }
  PrintParameters(m, out);
}

// The module's name as the first positional of `cmd`.
void AddModuleArgument(CLI::App& cmd, std::string& name) {
  cmd.add_option("name", name, "the module's name")->required()->type_name("NAME");
}

struct LoadFlags {
  ClusterFlags cluster;
  std::string spec;
  std::string weights;
  std::string checkpoint;
  uint64_t seed = 0;
  std::string mesh;
  std::string name;
  std::string plan;
  std::string tp_plan;  // a program's Hugging Face tp_plan file
  std::string prefix;   // its patterns' base module
  int mesh_dim = -1;
};

// `module load` of a torch.export archive: its weights from the archive or --weights (a Hugging
// Face checkpoint directory).
absl::Status LoadProgram(const LoadFlags& f, std::ostream& out) {
  if (!f.checkpoint.empty() || f.seed != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.spec,
        " is a program: its weights come from the archive or from --weights (a Hugging "
        "Face checkpoint directory), not --checkpoint or --seed"));
  }
  client::LoadExportedOptions options;
  if (!f.plan.empty()) {
    ASSIGN_OR_RETURN(options.plan_json, ReadTextFile(f.plan));
  }
  options.tp_prefix = f.prefix;
  if (f.tp_plan == "hf") {
    // The checkpoint's own plan, config.json's base_model_tp_plan.
    if (f.weights.empty()) {
      return absl::InvalidArgumentError(
          "--tp-plan hf takes the plan of the checkpoint's config.json: give --weights DIR");
    }
    ASSIGN_OR_RETURN(const import::HfCheckpoint checkpoint, import::OpenHfCheckpoint(f.weights));
    ASSIGN_OR_RETURN(options.tp_plan_json, import::HfTpPlanText(checkpoint));
    if (options.tp_prefix.empty()) options.tp_prefix = import::BaseModelPrefix(checkpoint);
  } else if (!f.tp_plan.empty()) {
    ASSIGN_OR_RETURN(options.tp_plan_json, ReadTextFile(f.tp_plan));
  }
  options.mesh_dim = f.mesh_dim;
  options.checkpoint_dir = f.weights;
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  ASSIGN_OR_RETURN(client::MeshInfo mesh, client::GetMesh(*session, f.mesh));
  ProgressBar bar("load");
  options.progress = [&bar](int64_t done, int64_t total) { bar(done, total); };
  ASSIGN_OR_RETURN(client::Module module,
                   client::LoadExported(*session, f.spec, mesh, f.name, options));
  PrintModule(module.info(), out);
  return absl::OkStatus();
}

absl::Status Load(const LoadFlags& f, std::ostream& out) {
  if (absl::EndsWith(f.spec, ".pt2")) return LoadProgram(f, out);
  if (!f.tp_plan.empty() || !f.prefix.empty() || f.mesh_dim >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tp-plan, --prefix and --mesh-dim lay out a program (FILE.pt2); ", f.spec,
                     " is a spec: give its plan with --plan"));
  }
  ASSIGN_OR_RETURN(std::string spec, ReadTextFile(f.spec));
  client::LoadModuleOptions options;
  if (!f.plan.empty()) {
    ASSIGN_OR_RETURN(options.plan_json, ReadTextFile(f.plan));
  }
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  ASSIGN_OR_RETURN(client::MeshInfo mesh, client::GetMesh(*session, f.mesh));
  ProgressBar bar("load");
  options.progress = [&bar](int64_t done, int64_t total) { bar(done, total); };
  ASSIGN_OR_RETURN(
      client::Module module,
      client::LoadModule(*session, spec, mesh, f.name,
                         {.weights_path = f.weights, .seed = f.seed, .checkpoint = f.checkpoint},
                         options));
  PrintModule(module.info(), out);
  return absl::OkStatus();
}

struct PlanFlags {
  ClusterFlags cluster;
  std::string name;
  std::string plan;
};

// parallelize (`distribute` false) or distribute the module by the plan file.
absl::Status ApplyPlanFile(const PlanFlags& f, bool distribute, std::ostream& out) {
  ASSIGN_OR_RETURN(std::string plan, ReadTextFile(f.plan));
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  ASSIGN_OR_RETURN(client::Module module, client::GetModule(*session, f.name));
  ASSIGN_OR_RETURN(client::Module after, distribute ? client::DistributeModule(module, plan)
                                                    : client::ParallelizeModule(module, "", plan));
  PrintModule(after.info(), out);
  return absl::OkStatus();
}

absl::Status Parallelize(const PlanFlags& f, std::ostream& out) {
  return ApplyPlanFile(f, /*distribute=*/false, out);
}

absl::Status Distribute(const PlanFlags& f, std::ostream& out) {
  return ApplyPlanFile(f, /*distribute=*/true, out);
}

struct ShowFlags {
  ClusterFlags cluster;
  std::string name;
};

absl::Status Show(const ShowFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  ASSIGN_OR_RETURN(client::Module module, client::GetModule(*session, f.name));
  PrintModule(module.info(), out);
  return absl::OkStatus();
}

struct ListFlags {
  ClusterFlags cluster;
};

absl::Status List(const ListFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  ASSIGN_OR_RETURN(std::vector<client::ModuleInfo> modules, client::ListModules(*session));
  if (modules.empty()) out << "no modules\n";
  for (const client::ModuleInfo& m : modules) PrintSummary(m, out);
  return absl::OkStatus();
}

struct RemoveFlags {
  ClusterFlags cluster;
  std::vector<std::string> names;
};

absl::Status Remove(const RemoveFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  for (const std::string& name : f.names) {
    RETURN_IF_ERROR(client::RemoveModule(*session, name));
    out << "removed module " << name << "\n";
  }
  return absl::OkStatus();
}

struct ExportPlanFlags {
  ClusterFlags cluster;
  std::string name;
  std::string out;
};

absl::Status ExportPlan(const ExportPlanFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  ASSIGN_OR_RETURN(client::Module module, client::GetModule(*session, f.name));
  ASSIGN_OR_RETURN(std::string plan, module.ExportPlan());
  if (plan.empty()) {
    std::cerr << "module " << f.name << " has no plan: every parameter is Replicate\n";
  } else if (plan.back() != '\n') {
    plan += "\n";
  }
  if (f.out.empty()) {
    out << plan;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(WriteFileBytes(f.out, std::as_bytes(std::span(plan.data(), plan.size()))));
  out << "wrote the plan of module " << f.name << " to " << f.out << "\n";
  return absl::OkStatus();
}

// `path` with ".rankR" before its extension: y.npy -> y.rank0.npy.
std::string RankPath(const std::string& path, int64_t rank) {
  std::filesystem::path p(path);
  const std::string stem = p.stem().string();
  return (p.parent_path() / absl::StrCat(stem, ".rank", rank, p.extension().string())).string();
}

// Writes `t` to `path` (.npy, or tensor `key` of a .safetensors file) and says so.
absl::Status WriteOutput(const std::string& path, const std::string& key, HostTensor t,
                         std::ostream& out) {
  const std::string what = absl::StrCat(DTypeName(t.dtype()), ShapeToString(t.shape()));
  RETURN_IF_ERROR(WriteTensorFile(path, key, std::move(t)));
  out << "wrote " << what << " to " << path << "\n";
  return absl::OkStatus();
}

// Writes a forward's full output to `path` and every rank's local output (in the row-major order of
// `mesh`) to RankPath(path, rank).
absl::Status WriteOutputs(client::ModuleOutput output, const DeviceMesh& mesh,
                          const std::string& path, std::ostream& out) {
  if (output.full.has_value()) {
    RETURN_IF_ERROR(WriteOutput(path, "output", *std::move(output.full), out));
  }
  if (output.locals.empty()) return absl::OkStatus();
  if (mesh.size() != static_cast<int64_t>(output.locals.size())) {
    return absl::InternalError(absl::StrCat("the service sent ", output.locals.size(),
                                            " local outputs for a mesh of ", mesh.size(),
                                            " ranks"));
  }
  for (size_t i = 0; i < output.locals.size(); ++i) {
    RETURN_IF_ERROR(
        WriteOutput(RankPath(path, mesh.ranks()[i]), "output", std::move(output.locals[i]), out));
  }
  return absl::OkStatus();
}

struct ForwardFlags {
  ClusterFlags cluster;
  std::string name;
  std::vector<std::string> inputs;
  std::string out;
  bool local = false;
};

// `path` with ".NAME" before its extension: y.npy -> y.past_key.npy.
std::string NamedPath(const std::string& path, const std::string& name) {
  std::filesystem::path p(path);
  return (p.parent_path() / absl::StrCat(p.stem().string(), ".", name, p.extension().string()))
      .string();
}

// The forward of a module imported from a program: each input NAME=FILE (or FILE for its one
// input); the first output to `--out`, each other one beside it by name.
absl::Status ForwardProgram(const ForwardFlags& f, const client::Module& module,
                            std::ostream& out) {
  const client::ImportedInfo& p = *module.info().imported;
  std::map<std::string, std::string> files;
  for (const std::string& given : f.inputs) {
    const size_t eq = given.find('=');
    if (eq != std::string::npos) {
      files[given.substr(0, eq)] = given.substr(eq + 1);
    } else if (p.inputs.size() == 1) {
      files[p.inputs[0].name] = given;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--input ", given, ": module ", f.name,
                                                     " takes ", p.inputs.size(),
                                                     " inputs; name each NAME=FILE"));
    }
  }
  for (const auto& [name, file] : files) {
    const bool known =
        std::any_of(p.inputs.begin(), p.inputs.end(),
                    [&](const client::ProgramEdgeInfo& e) { return e.name == name; });
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat("--input ", name, "=", file, ": module ",
                                                     f.name, " has no input '", name, "'"));
    }
  }
  std::vector<HostTensor> inputs;
  for (const client::ProgramEdgeInfo& e : p.inputs) {
    auto it = files.find(e.name);
    if (it == files.end()) {
      return absl::InvalidArgumentError(absl::StrCat("module ", f.name, " takes input '", e.name,
                                                     "': give --input ", e.name, "=FILE.npy"));
    }
    ASSIGN_OR_RETURN(HostTensor t, ReadTensorFile(it->second, ""));
    inputs.push_back(std::move(t));
  }
  ASSIGN_OR_RETURN(std::vector<HostTensor> outputs, module.ForwardMany(inputs));
  for (size_t o = 0; o < outputs.size(); ++o) {
    const std::string path = o == 0 ? f.out : NamedPath(f.out, p.outputs[o].name);
    RETURN_IF_ERROR(WriteOutput(path, "output", std::move(outputs[o]), out));
  }
  return absl::OkStatus();
}

absl::Status Forward(const ForwardFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  ASSIGN_OR_RETURN(client::Module module, client::GetModule(*session, f.name));
  if (module.info().imported.has_value()) {
    if (f.local) {
      return absl::InvalidArgumentError(
          absl::StrCat("module ", f.name, " is a program: its forward gives full outputs only"));
    }
    return ForwardProgram(f, module, out);
  }
  if (f.inputs.size() != 1 || f.inputs[0].find('=') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("module ", f.name, " takes one input: give --input FILE once"));
  }
  ASSIGN_OR_RETURN(HostTensor input, ReadTensorFile(f.inputs[0], ""));
  ASSIGN_OR_RETURN(client::MeshInfo mesh, client::GetMesh(*session, module.info().mesh));
  ASSIGN_OR_RETURN(
      client::ModuleOutput output,
      module.Forward(input, f.local ? client::Outputs::kBoth : client::Outputs::kFull));
  return WriteOutputs(std::move(output), mesh.mesh, f.out, out);
}

// output.sum() in double, for a floating output; none for other dtypes.
std::optional<double> SumOf(const HostTensor& t) {
  double sum = 0;
  if (t.dtype() == DType::kFloat32) {
    for (int64_t i = 0; i < t.num_elements(); ++i) sum += t.data_as<float>()[i];
  } else if (t.dtype() == DType::kFloat64) {
    for (int64_t i = 0; i < t.num_elements(); ++i) sum += t.data_as<double>()[i];
  } else {
    return std::nullopt;
  }
  return sum;
}

struct StepFlags {
  ClusterFlags cluster;
  std::string name;
  std::string input;
  std::string loss = "sum";
  std::string grad_output;
  std::optional<double> lr;
  double momentum = 0;
  double weight_decay = 0;
  std::string grads_out;
  std::string out;
};

absl::Status Step(const StepFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(HostTensor input, ReadTensorFile(f.input, ""));
  client::StepOptions options;
  if (!f.grad_output.empty()) {
    ASSIGN_OR_RETURN(options.grad_output, ReadTensorFile(f.grad_output, ""));
  }
  if (f.lr.has_value()) {
    options.sgd =
        client::SgdOptions{.lr = *f.lr, .momentum = f.momentum, .weight_decay = f.weight_decay};
  }
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  ASSIGN_OR_RETURN(client::Module module, client::GetModule(*session, f.name));
  ASSIGN_OR_RETURN(client::StepResult result, module.Step(input, options));
  if (!options.grad_output.has_value() && result.output.full.has_value()) {
    if (std::optional<double> loss = SumOf(*result.output.full); loss.has_value()) {
      out << absl::StrFormat("loss (output.sum()): %.9g\n", *loss);
    }
  }
  if (options.sgd.has_value()) {
    out << absl::StrFormat(
        "SGD (lr %g, momentum %g, weight_decay %g) updated the %d parameters of module %s\n",
        options.sgd->lr, options.sgd->momentum, options.sgd->weight_decay, result.gradients.size(),
        f.name);
  } else {
    out << "gradients only (no --lr): the parameters are as they were\n";
  }
  std::vector<std::string> grads;
  for (const client::ModuleParameter& p : result.gradients) grads.push_back(p.grad);
  out << "gradients: " << absl::StrJoin(grads, ", ") << "\n";
  if (!f.out.empty()) {
    if (!result.output.full.has_value()) {
      return absl::InternalError("the service sent no full output for the step");
    }
    RETURN_IF_ERROR(WriteOutput(f.out, "output", *std::move(result.output.full), out));
  }
  if (!f.grads_out.empty()) {
    SafetensorsFile file;
    for (const client::ModuleParameter& p : result.gradients) {
      ASSIGN_OR_RETURN(client::DTensor grad, client::GetTensor(*session, p.grad));
      ASSIGN_OR_RETURN(HostTensor g, grad.FullTensor());
      file.tensors.emplace(absl::StrCat(p.fqn, ".grad"), std::move(g));
    }
    RETURN_IF_ERROR(WriteSafetensorsFile(f.grads_out, file));
    out << "wrote " << file.tensors.size() << " gradients to " << f.grads_out << "\n";
  }
  return absl::OkStatus();
}

struct SaveFlags {
  ClusterFlags cluster;
  std::string name;
  std::string out;
  std::string checkpoint;
  bool grads = false;
};

absl::Status Save(const SaveFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  if (f.out.empty() == f.checkpoint.empty()) {
    return absl::InvalidArgumentError("module save: give --out FILE or --checkpoint DIR");
  }
  ASSIGN_OR_RETURN(client::Module module, client::GetModule(*session, f.name));
  if (!f.checkpoint.empty()) {
    ASSIGN_OR_RETURN(client::SaveInfo info, module.SaveCheckpoint(f.checkpoint, f.grads));
    out << "saved module " << f.name << " (" << info.saved_layout << ") into checkpoint "
        << info.path << ": " << info.files << " block files in " << info.data_dir << "\n";
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(module.Save(f.out, f.grads));
  const size_t n = module.info().parameters.size();
  out << "wrote the state_dict of module " << f.name << " (" << n << " parameters"
      << (f.grads ? absl::StrCat(" and their ", n, " gradients") : "") << ") to " << f.out << "\n";
  return absl::OkStatus();
}

struct PublishFlags {
  ClusterFlags cluster;
  std::string name;
  std::string model;
  std::string version;
  int64_t max_batch_size = 0;
  int64_t max_queue_delay_us = 500;
};

absl::Status Publish(const PublishFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  ASSIGN_OR_RETURN(client::Module module, client::GetModule(*session, f.name));
  ASSIGN_OR_RETURN(client::PublishedVersion published,
                   module.Publish({.model = f.model,
                                   .version = f.version,
                                   .max_batch_size = f.max_batch_size,
                                   .max_queue_delay = absl::Microseconds(f.max_queue_delay_us)}));
  out << "published " << PublishedText(published) << " over KServe v2 gRPC at "
      << f.cluster.coordinator << "\n";
  return absl::OkStatus();
}

struct UnpublishFlags {
  ClusterFlags cluster;
  std::string model;
  std::string version;
};

absl::Status Unpublish(const UnpublishFlags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto session, ConnectClient(f.cluster));
  RETURN_IF_ERROR(client::Unpublish(*session, f.model, f.version));
  out << "unpublished " << f.model
      << (f.version.empty() ? " (every version)" : absl::StrCat(" version ", f.version)) << "\n";
  return absl::OkStatus();
}

void AddLoadCommand(CLI::App& module, Action* action) {
  auto load = AddCommand(module, "load",
                         "load a module spec onto a mesh, its parameters from a safetensors file "
                         "(state_dict names), a checkpoint, or initialized as torch does from a "
                         "seed",
                         Load, action);
  AddClusterFlags(*load.app, load.flags->cluster, /*with_client=*/true);
  load.app
      ->add_option("spec", load.flags->spec,
                   "the module spec (JSON), or a torch.export archive (torch.export.save's .pt2)")
      ->required()
      ->type_name("SPEC.json|MODEL.pt2");
  CLI::Option* weights =
      load.app
          ->add_option("--weights", load.flags->weights,
                       "the parameters, by state_dict name; for a .pt2, a Hugging Face checkpoint "
                       "directory in place of the archive's weights")
          ->type_name("W.safetensors|DIR");
  CLI::Option* checkpoint =
      load.app
          ->add_option("--checkpoint", load.flags->checkpoint,
                       "read the parameters from this checkpoint directory on the workers "
                       "(absolute; `module save --checkpoint`), each rank only its shard")
          ->type_name("DIR")
          ->excludes(weights);
  load.app
      ->add_option("--seed", load.flags->seed,
                   "initialize the parameters from this seed instead of --weights or --checkpoint")
      ->type_name("N")
      ->capture_default_str()
      ->excludes(weights)
      ->excludes(checkpoint);
  load.app->add_option("--mesh", load.flags->mesh, "the mesh's name")->required()->type_name("M");
  load.app->add_option("--name", load.flags->name, "the module's name")
      ->required()
      ->type_name("NAME");
  CLI::Option* plan =
      load.app
          ->add_option("--plan", load.flags->plan,
                       "a plan file applied as it loads (default: every parameter Replicate)")
          ->type_name("PLAN.json");
  load.app
      ->add_option("--tp-plan", load.flags->tp_plan,
                   "a .pt2's Hugging Face tp_plan (JSON object of pattern to style string), or hf: "
                   "the base_model_tp_plan of --weights' config.json")
      ->type_name("TP.json|hf")
      ->excludes(plan);
  load.app->add_option("--prefix", load.flags->prefix, "the tp_plan's base module (\"model\")")
      ->type_name("P");
  load.app
      ->add_option("--mesh-dim", load.flags->mesh_dim,
                   "a .pt2's plan on this mesh dim (default: the plan's own, else the last)")
      ->type_name("D");
}

void AddParallelizeCommand(CLI::App& module, Action* action) {
  auto parallelize =
      AddCommand(module, "parallelize",
                 "parallelize_module: shard the module by a plan file (on the plan's "
                 "mesh_dim) and show it",
                 Parallelize, action);
  AddClusterFlags(*parallelize.app, parallelize.flags->cluster, /*with_client=*/true);
  AddModuleArgument(*parallelize.app, parallelize.flags->name);
  parallelize.app
      ->add_option("--plan", parallelize.flags->plan,
                   "{\"mesh_dim\": ..., \"plan\": {pattern: style}}")
      ->required()
      ->type_name("PLAN.json");
}

void AddDistributeCommand(CLI::App& module, Action* action) {
  auto distribute = AddCommand(module, "distribute",
                               "distribute_module: place the module's parameters by a partition "
                               "file and show it",
                               Distribute, action);
  AddClusterFlags(*distribute.app, distribute.flags->cluster, /*with_client=*/true);
  AddModuleArgument(*distribute.app, distribute.flags->name);
  distribute.app
      ->add_option("--partition", distribute.flags->plan,
                   "{\"distribute\": {parameter pattern: placements}}")
      ->required()
      ->type_name("PART.json");
}

void AddShowCommand(CLI::App& module, Action* action) {
  auto show =
      AddCommand(module, "show",
                 "a module: every parameter's placements and each rank's local shape and "
                 "offset, the input and output layouts, the plan and its unmatched patterns",
                 Show, action);
  AddClusterFlags(*show.app, show.flags->cluster, /*with_client=*/true);
  AddModuleArgument(*show.app, show.flags->name);
}

void AddListCommand(CLI::App& module, Action* action) {
  auto list = AddCommand(module, "list", "every module: mesh, parameters, plan, published versions",
                         List, action);
  AddClusterFlags(*list.app, list.flags->cluster, /*with_client=*/true);
}

void AddRemoveCommand(CLI::App& module, Action* action) {
  auto rm = AddCommand(module, "rm",
                       "remove modules: their programs, parameters, gradients and published "
                       "versions",
                       Remove, action);
  AddClusterFlags(*rm.app, rm.flags->cluster, /*with_client=*/true);
  rm.app->add_option("names", rm.flags->names, "the modules' names")
      ->required()
      ->type_name("NAME...");
}

void AddExportPlanCommand(CLI::App& module, Action* action) {
  auto export_plan = AddCommand(module, "export-plan",
                                "the module's plan as a plan file (every argument written out)",
                                ExportPlan, action);
  AddClusterFlags(*export_plan.app, export_plan.flags->cluster, /*with_client=*/true);
  AddModuleArgument(*export_plan.app, export_plan.flags->name);
  export_plan.app->add_option("--out", export_plan.flags->out, "write it here (default: stdout)")
      ->type_name("plan.json");
}

void AddForwardCommand(CLI::App& module, Action* action) {
  auto forward = AddCommand(module, "forward",
                            "module(input) on the workers: the full input in, the full output out",
                            Forward, action);
  AddClusterFlags(*forward.app, forward.flags->cluster, /*with_client=*/true);
  AddModuleArgument(*forward.app, forward.flags->name);
  forward.app
      ->add_option("--input", forward.flags->inputs,
                   "the full input (.npy or .safetensors); a program's inputs each as NAME=FILE "
                   "(repeated)")
      ->required()
      ->type_name("[NAME=]x.npy");
  forward.app->add_option("--out", forward.flags->out, "the full output (.npy or .safetensors)")
      ->required()
      ->type_name("y.npy");
  forward.app->add_flag("--local", forward.flags->local,
                        "also write each rank's local output, as y.rank0.npy, y.rank1.npy, ...");
}

void AddStepCommand(CLI::App& module, Action* action) {
  auto step = AddCommand(module, "step",
                         "a training step on the workers: forward, backward from the loss, and "
                         "with --lr torch.optim.SGD's update",
                         Step, action);
  StepFlags* step_flags = step.flags;
  AddClusterFlags(*step.app, step.flags->cluster, /*with_client=*/true);
  AddModuleArgument(*step.app, step.flags->name);
  step.app->add_option("--input", step.flags->input, "the full input (.npy or .safetensors)")
      ->required()
      ->type_name("x.npy");
  CLI::Option* loss = step.app->add_option("--loss", step.flags->loss, "the loss: output.sum()")
                          ->type_name("LOSS")
                          ->check(CLI::IsMember({"sum"}))
                          ->capture_default_str();
  step.app
      ->add_option("--grad-output", step.flags->grad_output,
                   "the full output's gradient, instead of --loss")
      ->type_name("g.npy")
      ->excludes(loss);
  CLI::Option* lr = step.app
                        ->add_option_function<double>(
                            "--lr", [step_flags](const double& lr) { step_flags->lr = lr; },
                            "SGD's learning rate (without it: gradients only, no update)")
                        ->type_name("LR");
  step.app->add_option("--momentum", step.flags->momentum, "SGD's momentum")
      ->type_name("M")
      ->capture_default_str()
      ->needs(lr);
  step.app->add_option("--weight-decay", step.flags->weight_decay, "SGD's weight decay")
      ->type_name("W")
      ->capture_default_str()
      ->needs(lr);
  step.app
      ->add_option("--grads-out", step.flags->grads_out,
                   "write every gradient whole, named <fqn>.grad")
      ->type_name("g.safetensors");
  step.app->add_option("--out", step.flags->out, "write the forward's full output")
      ->type_name("y.npy");
}

void AddSaveCommand(CLI::App& module, Action* action) {
  auto save = AddCommand(module, "save",
                         "write the module's state_dict to a safetensors file (--out) or a "
                         "sharded checkpoint (--checkpoint)",
                         Save, action);
  AddClusterFlags(*save.app, save.flags->cluster, /*with_client=*/true);
  AddModuleArgument(*save.app, save.flags->name);
  CLI::Option* save_out =
      save.app->add_option("--out", save.flags->out, "the file, on this machine")
          ->type_name("params.safetensors");
  CLI::Option* save_checkpoint =
      save.app
          ->add_option("--checkpoint", save.flags->checkpoint,
                       "instead, a checkpoint directory on the workers' filesystem (absolute; its "
                       "parent must exist on every worker): each worker writes its own blocks")
          ->type_name("DIR")
          ->excludes(save_out);
  save_out->excludes(save_checkpoint);
  save.app->add_flag("--grads", save.flags->grads,
                     "also every gradient of the last step, named <fqn>.grad");
}

void AddPublishCommand(CLI::App& module, Action* action) {
  auto publish = AddCommand(module, "publish",
                            "serve the module's forward over KServe v2 gRPC (the coordinator's "
                            "port) as model NAME (or --model), with dynamic batching",
                            Publish, action);
  AddClusterFlags(*publish.app, publish.flags->cluster, /*with_client=*/true);
  AddModuleArgument(*publish.app, publish.flags->name);
  publish.app
      ->add_option("--model", publish.flags->model,
                   "the served model's name (default: the module's); one module may be served "
                   "under several")
      ->type_name("MODEL");
  publish.app->add_option("--version", publish.flags->version, "the model version (default: 1)")
      ->type_name("V");
  publish.app
      ->add_option("--max-batch-size", publish.flags->max_batch_size,
                   "join requests into batches of at most B rows (0: no batching)")
      ->type_name("B")
      ->capture_default_str();
  publish.app
      ->add_option("--max-queue-delay-us", publish.flags->max_queue_delay_us,
                   "the oldest request of a batch waits at most this long")
      ->type_name("U")
      ->capture_default_str();
}

void AddUnpublishCommand(CLI::App& module, Action* action) {
  auto unpublish = AddCommand(module, "unpublish", "stop serving a model, or one version of it",
                              Unpublish, action);
  AddClusterFlags(*unpublish.app, unpublish.flags->cluster, /*with_client=*/true);
  unpublish.app->add_option("model", unpublish.flags->model, "the served model's name")
      ->required()
      ->type_name("MODEL");
  unpublish.app
      ->add_option("--version", unpublish.flags->version, "only this version (default: every one)")
      ->type_name("V");
}

}  // namespace

void AddModuleCommands(CLI::App& app, Action* action) {
  CLI::App* module = app.add_subcommand(
      "module",
      "torch.nn modules on the cluster: load a JSON spec with weights, parallelize it by a plan, "
      "run forwards and training steps on the workers, save, serve");
  module->require_subcommand(1);
  AddLoadCommand(*module, action);
  AddParallelizeCommand(*module, action);
  AddDistributeCommand(*module, action);
  AddShowCommand(*module, action);
  AddListCommand(*module, action);
  AddRemoveCommand(*module, action);
  AddExportPlanCommand(*module, action);
  AddForwardCommand(*module, action);
  AddStepCommand(*module, action);
  AddSaveCommand(*module, action);
  AddPublishCommand(*module, action);
  AddUnpublishCommand(*module, action);
  // Set last: subcommands take their group from their parent when they are added.
  module->group(
      "Commands that run or talk to a cluster (--coordinator HOST:PORT, default "
      "$TESSERA_COORDINATOR)");
}

}  // namespace tessera::cli
