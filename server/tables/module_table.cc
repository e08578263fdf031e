#include "server/tables/module_table.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/modules/module_weights.h"
#include "core/names.h"
#include "proto/convert.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

v1::EdgeLayoutInfo EdgeToProto(const EdgeLayout& edge) {
  v1::EdgeLayoutInfo info;
  *info.mutable_placement() = ToProto(edge.placement);
  info.set_is_dtensor(edge.is_dtensor);
  return info;
}

}  // namespace

ModuleEntry::ModuleEntry(std::string name, std::shared_ptr<Mesh> mesh, ModelSpec spec,
                         std::string spec_json, int64_t program_id)
    : name(std::move(name)),
      mesh(std::move(mesh)),
      spec(std::move(spec)),
      spec_json(std::move(spec_json)),
      dtype(ParameterDType(this->spec.input)),
      program_id(program_id) {}

ModuleEntry::ModuleEntry(std::string name, std::shared_ptr<Mesh> mesh,
                         std::shared_ptr<const ModuleGraph> graph, int64_t program_id)
    : name(std::move(name)),
      mesh(std::move(mesh)),
      dtype(DType::kFloat32),
      program_id(program_id),
      graph(std::move(graph)) {}

std::string ParameterTensorName(const std::string& module, const std::string& fqn) {
  return absl::StrCat(module, ".", fqn);
}

std::string GradientTensorName(const std::string& module, const std::string& fqn) {
  return absl::StrCat(module, ".", fqn, ".grad");
}

std::string MomentumWorkerName(const std::string& module, const std::string& fqn) {
  return absl::StrCat("module/", module, "/", fqn, ".momentum");
}

std::string ModuleOwner(const std::string& module) { return absl::StrCat("module:", module); }

absl::Status ModuleTable::CheckName(const std::string& name) {
  return tessera::CheckName(NameKind::kModule, name);
}

absl::Status ModuleTable::Persist(const ModuleEntry& module) const {
  if (store_ == nullptr) return absl::OkStatus();
  return store_->Put("module", module.name, Record(module).SerializeAsString());
}

absl::Status ModuleTable::PersistPending(const ModuleEntry& module, const std::string& plan_json,
                                         const std::string& mesh_dim) const {
  if (store_ == nullptr) return absl::OkStatus();
  v1::ModuleRecord record = Record(module);
  record.set_has_pending_plan(true);
  record.set_pending_plan_json(plan_json);
  record.set_pending_mesh_dim(mesh_dim);
  return store_->Put("module", module.name, record.SerializeAsString());
}

v1::ModuleRecord ModuleTable::Record(const ModuleEntry& module) {
  v1::ModuleRecord record;
  record.set_name(module.name);
  record.set_mesh(module.mesh->name);
  record.set_spec_json(module.spec_json);
  record.set_plan_json(module.plan_json);
  record.set_mesh_dim(module.mesh_dim);
  if (module.graph != nullptr) *record.mutable_program() = module.graph->source;
  for (const v1::PublishedVersion& p : module.published) *record.add_published() = p;
  return record;
}

void ModuleTable::Unrecord(const std::string& name) const {
  if (store_ == nullptr) return;
  if (absl::Status s = store_->Erase("module", name); !s.ok()) {
    spdlog::error("module '{}' was removed but its record stays: {}", name, s.ToString());
  }
}

void ModuleTable::SetRecovering(std::set<std::string> names) {
  absl::MutexLock lock(&mu_);
  recovering_ = std::move(names);
}

void ModuleTable::DoneRecovering(const std::string& name) {
  absl::MutexLock lock(&mu_);
  recovering_.erase(name);
}

void ModuleTable::CommitRecovered(std::shared_ptr<ModuleEntry> module, absl::Status lost) {
  absl::MutexLock lock(&mu_);
  if (lost.ok()) {
    lost_.erase(module->name);
  } else {
    lost_[module->name] = std::move(lost);
  }
  modules_[module->name] = std::move(module);
}

absl::Status ModuleTable::Reserve(const std::string& name) {
  absl::MutexLock lock(&mu_);
  if (recovering_.contains(name)) {
    return absl::UnavailableError(absl::StrCat(
        "module '", name, "' is being recovered after a coordinator restart; try again shortly"));
  }
  if (modules_.contains(name)) {
    return absl::AlreadyExistsError(absl::StrCat("a module named '", name, "' exists"));
  }
  if (!loading_.insert(name).second) {
    return absl::AlreadyExistsError(absl::StrCat("a module named '", name, "' is being loaded"));
  }
  return absl::OkStatus();
}

void ModuleTable::Unreserve(const std::string& name) {
  absl::MutexLock lock(&mu_);
  loading_.erase(name);
}

void ModuleTable::Commit(std::shared_ptr<ModuleEntry> module) {
  absl::MutexLock lock(&mu_);
  loading_.erase(module->name);
  modules_[module->name] = std::move(module);
}

absl::StatusOr<std::shared_ptr<ModuleEntry>> ModuleTable::Find(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = modules_.find(name);
  if (it == modules_.end()) {
    if (recovering_.contains(name)) {
      return absl::UnavailableError(absl::StrCat(
          "module '", name, "' is being recovered after a coordinator restart; try again shortly"));
    }
    return absl::NotFoundError(absl::StrCat("no module named ", QuotedName(name)));
  }
  if (auto lost = lost_.find(name); lost != lost_.end()) return lost->second;
  return it->second;
}

absl::StatusOr<std::shared_ptr<ModuleEntry>> ModuleTable::Take(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = modules_.find(name);
  if (it == modules_.end()) {
    return absl::NotFoundError(absl::StrCat("no module named ", QuotedName(name)));
  }
  std::shared_ptr<ModuleEntry> module = std::move(it->second);
  modules_.erase(it);
  lost_.erase(name);
  return module;
}

std::vector<std::shared_ptr<ModuleEntry>> ModuleTable::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<ModuleEntry>> modules;
  modules.reserve(modules_.size());
  for (const auto& [name, module] : modules_) modules.push_back(module);
  return modules;
}

int64_t ModuleTable::NextProgramId() {
  absl::MutexLock lock(&mu_);
  return next_program_id_++;
}

std::vector<std::string> ModuleTable::ForgetMesh(const Mesh& mesh) {
  std::vector<std::shared_ptr<ModuleEntry>> gone;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = modules_.begin(); it != modules_.end();) {
      if (it->second->mesh.get() != &mesh) {
        ++it;
        continue;
      }
      lost_.erase(it->first);
      gone.push_back(std::move(it->second));
      it = modules_.erase(it);
    }
  }
  std::vector<std::string> names;
  for (const auto& module : gone) {
    absl::MutexLock lock(&module->mu);
    module->removed = true;
    Unrecord(module->name);
    for (const v1::PublishedVersion& p : module->published) {
      if (unpublish_) unpublish_(p);
    }
    module->published.clear();
    if (!module->momentum) continue;
    for (const ProgramParameter& p : module->program.parameters) {
      names.push_back(MomentumWorkerName(module->name, p.fqn));
    }
  }
  return names;
}

v1::ModuleInfo ModuleTable::Describe(const ModuleEntry& module) {
  absl::ReaderMutexLock lock(&module.mu);
  const Program& program = module.program;
  v1::ModuleInfo info;
  info.set_name(module.name);
  info.set_mesh(module.mesh->name);
  info.set_spec_json(module.spec_json);
  info.set_plan_json(module.plan_json);
  for (size_t i = 0; i < module.parameters.size(); ++i) {
    const DTensorEntry& t = *module.parameters[i];
    v1::ModuleParameter* p = info.add_parameters();
    p->set_fqn(i < program.parameters.size() ? program.parameters[i].fqn : t.name);
    p->set_tensor(t.name);
    *p->mutable_meta() = ToProto(t.spec);
    if (i < module.gradients.size()) p->set_grad(module.gradients[i]->name);
  }
  info.set_input_dtype(ToProto(program.input.dtype));
  for (int64_t d : program.input.shape) info.add_input_shape(d);
  *info.mutable_input_layout() = EdgeToProto(program.input_layout);
  *info.mutable_output_layout() = EdgeToProto(program.output_layout);
  info.set_tp_mesh_dim(program.tp_mesh_dim);
  info.set_output_dtype(ToProto(program.output_dtype));
  info.set_output_features(program.output_features);
  for (const std::string& u : program.unmatched) info.add_unmatched(u);
  for (const v1::PublishedVersion& p : module.published) *info.add_published() = p;
  info.set_program_steps(static_cast<int64_t>(program.forward.size()));
  if (module.graph != nullptr) {
    const ModuleGraph& g = *module.graph;
    info.set_program_steps(g.compiled.steps_size());
    v1::ImportedInfo* imported = info.mutable_imported();
    imported->set_source(g.source.source());
    imported->set_nodes(static_cast<int64_t>(g.program.nodes.size()));
    for (int i : g.user_inputs) {
      v1::ProgramEdge* e = imported->add_inputs();
      e->set_name(g.program.inputs[i].name);
      *e->mutable_meta() = ToProto(g.planned.values[i]);
    }
    for (size_t o = 0; o < g.program.outputs.size(); ++o) {
      v1::ProgramEdge* e = imported->add_outputs();
      e->set_name(g.program.output_names[o]);
      *e->mutable_meta() = ToProto(g.planned.values[g.program.outputs[o]]);
    }
    for (const auto& [fqn, style] : g.layout.assigned) {
      imported->add_styled(absl::StrCat(fqn, ": ", style));
    }
    imported->set_tp_plan_json(g.source.tp_plan_json());
    imported->set_collectives(g.collectives);
  }
  return info;
}

}  // namespace tessera
