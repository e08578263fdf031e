// Modules on the service: loading (weights streamed from a safetensors file), plans, forwards,
// training steps, saving and publishing, over a Session's ModuleService stub.

#include "tessera/module.h"

#include <filesystem>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/module_wire.h"
#include "client/session_impl.h"
#include "core/files/file_bytes.h"
#include "core/files/safetensors.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "import/program_weights.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "tessera/session.h"
#include "transfer/tensor_stream.h"

namespace tessera::client {

// Makes handles from replies; the one friend of Module.
struct ModuleAccess {
  static absl::StatusOr<Module> Adopt(std::shared_ptr<Session> session,
                                      const v1::ModuleInfo& info) {
    Module module;
    module.session_ = std::move(session);
    ASSIGN_OR_RETURN(module.info_, FromWire(info));
    return module;
  }
  static const std::shared_ptr<Session>& SessionOf(const Module& module) { return module.session_; }
};

namespace {

// The stubs of a module's session; FAILED_PRECONDITION for an empty handle.
absl::StatusOr<internal::SessionImpl*> ImplOf(const Module& module) {
  const std::shared_ptr<Session>& session = ModuleAccess::SessionOf(module);
  if (session == nullptr) return absl::FailedPreconditionError("empty Module handle");
  return &internal_impl(*session);
}

// Sends the bytes of every tensor of `header` (the file at `path`), in file order, a chunk at a
// time; false as soon as the server ended the stream.
absl::StatusOr<bool> SendWeights(const std::string& path, const SafetensorsHeader& header,
                                 grpc::ClientWriterInterface<v1::LoadModuleChunk>& writer,
                                 const Progress& progress) {
  uint64_t total = 0;
  for (const SafetensorsEntry& e : header.tensors) total += e.end - e.begin;
  uint64_t sent = 0;
  v1::LoadModuleChunk chunk;
  for (const SafetensorsEntry& e : header.tensors) {
    if (e.end <= e.begin) continue;  // a tensor of no bytes sends no chunk
    absl::Status read;
    const bool open = ForEachChunk(e.end - e.begin, [&](size_t at, size_t n) {
      absl::StatusOr<std::string> bytes = ReadFileRange(path, header.data_offset + e.begin + at, n);
      if (!bytes.ok()) {
        read = bytes.status();
        return false;
      }
      chunk.set_data(*std::move(bytes));
      if (!writer.Write(chunk)) return false;
      sent += n;
      if (progress) progress(static_cast<int64_t>(sent), static_cast<int64_t>(total));
      return true;
    });
    RETURN_IF_ERROR(read);
    if (!open) return false;
  }
  return true;
}

// The run's input message: the full tensor, or every rank's.
void InputToWire(std::span<const HostTensor> locals, const HostTensor* full,
                 v1::ModuleInput* input) {
  if (full != nullptr) *input->mutable_full() = ToProto(*full);
  for (const HostTensor& t : locals) *input->add_locals() = ToProto(t);
}

absl::StatusOr<ModuleOutput> RunForward(const Module& module, const HostTensor* full,
                                        std::span<const HostTensor> locals, Outputs outputs) {
  ASSIGN_OR_RETURN(internal::SessionImpl* const impl, ImplOf(module));
  v1::ForwardRequest request;
  request.set_name(module.name());
  InputToWire(locals, full, request.mutable_input());
  request.set_outputs(ToWire(outputs));
  grpc::ClientContext context;
  impl->Prepare(&context, kTransferTimeout);
  v1::ForwardReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl->modules->Forward(&context, request, &reply)));
  return FromWire(reply);
}

}  // namespace

absl::StatusOr<Module> LoadModule(Session& session, const std::string& spec_json, const Mesh& mesh,
                                  const std::string& name, const ModuleInit& init,
                                  const LoadModuleOptions& options) {
  const internal::SessionImpl& impl = internal_impl(session);
  v1::LoadModuleChunk chunk;
  v1::LoadModuleHeader* h = chunk.mutable_header();
  h->set_name(name);
  h->set_mesh(mesh.name);
  h->set_spec_json(spec_json);
  h->set_plan_json(options.plan_json);
  SafetensorsHeader weights;
  if (!init.weights_path.empty() && !init.checkpoint.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("module '", name, "': give weights ('",
                                                   init.weights_path, "') or a checkpoint ('",
                                                   init.checkpoint, "'), not both"));
  }
  if (!init.checkpoint.empty()) {
    h->set_checkpoint(init.checkpoint);
  } else if (init.weights_path.empty()) {
    h->set_seed(init.seed);
  } else {
    ASSIGN_OR_RETURN(weights, ReadSafetensorsHeader(init.weights_path));
    h->set_weights_follow(true);
    // Present even without tensors: a module without parameters loads from an empty file.
    v1::WeightsHeader* entries = chunk.mutable_weights();
    for (const SafetensorsEntry& e : weights.tensors) {
      v1::WeightsEntry* w = entries->add_tensors();
      w->set_name(e.name);
      w->set_dtype(ToProto(e.dtype));
      *w->mutable_shape() = ToProto(e.shape);
    }
  }
  grpc::ClientContext context;
  impl.Prepare(&context, kTransferTimeout);
  v1::ModuleInfo info;
  auto writer = impl.modules->LoadModule(&context, &info);
  absl::StatusOr<bool> open = writer->Write(chunk);
  if (*open && !init.weights_path.empty()) {
    open = SendWeights(init.weights_path, weights, *writer, options.progress);
    if (!open.ok()) {
      context.TryCancel();  // nothing of the module is kept
      writer->Finish().IgnoreError();
      return open.status();
    }
  }
  writer->WritesDone();
  RETURN_IF_ERROR(FromGrpcStatus(writer->Finish()));
  return ModuleAccess::Adopt(session.shared_from_this(), info);
}

absl::StatusOr<Module> LoadExported(Session& session, const std::string& archive_path,
                                    const Mesh& mesh, const std::string& name,
                                    const LoadExportedOptions& options) {
  const internal::SessionImpl& impl = internal_impl(session);
  ASSIGN_OR_RETURN(const import::ProgramWeights weights,
                   import::ProgramWeights::Open(archive_path, options.checkpoint_dir));
  v1::LoadModuleChunk chunk;
  v1::LoadModuleHeader* h = chunk.mutable_header();
  h->set_name(name);
  h->set_mesh(mesh.name);
  h->set_plan_json(options.plan_json);
  h->set_weights_follow(true);
  v1::ImportedProgram* program = h->mutable_program();
  try {
    program->set_program_json(
        weights.model().json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(archive_path, ": the program does not write as JSON: ", e.what()));
  }
  program->set_tp_plan_json(options.tp_plan_json);
  program->set_tp_prefix(options.tp_prefix);
  program->set_mesh_dim(options.mesh_dim);
  program->set_source(std::filesystem::path(archive_path).filename().string());
  int64_t total = 0;
  v1::WeightsHeader* entries = chunk.mutable_weights();
  for (const import::ProgramWeights::Weight& w : weights.weights()) {
    v1::WeightsEntry* e = entries->add_tensors();
    e->set_name(w.name);
    e->set_dtype(ToProto(w.meta.dtype));
    *e->mutable_shape() = ToProto(w.meta.shape);
    total += NumElements(w.meta.shape) * static_cast<int64_t>(DTypeSize(w.meta.dtype));
  }
  grpc::ClientContext context;
  impl.Prepare(&context, kTransferTimeout);
  v1::ModuleInfo info;
  auto writer = impl.modules->LoadModule(&context, &info);
  bool open = writer->Write(chunk);
  // Each weight read whole in turn (the client holds one at a time), sent a chunk at a time.
  int64_t sent = 0;
  for (const import::ProgramWeights::Weight& w : weights.weights()) {
    if (!open) break;
    absl::StatusOr<HostTensor> t = weights.Read(w);
    if (!t.ok()) {
      context.TryCancel();  // nothing of the module is kept
      writer->Finish().IgnoreError();
      return t.status();
    }
    const std::span<const std::byte> bytes = t->bytes();
    open = ForEachChunk(bytes.size(), [&](size_t at, size_t n) {
      v1::LoadModuleChunk data;
      data.set_data(reinterpret_cast<const char*>(bytes.data()) + at, n);
      if (!writer->Write(data)) return false;
      sent += static_cast<int64_t>(n);
      if (options.progress) options.progress(sent, total);
      return true;
    });
  }
  writer->WritesDone();
  RETURN_IF_ERROR(FromGrpcStatus(writer->Finish()));
  return ModuleAccess::Adopt(session.shared_from_this(), info);
}

absl::StatusOr<Module> ParallelizeModule(const Module& module, const std::string& mesh_or_dim,
                                         const std::string& plan_json) {
  ASSIGN_OR_RETURN(internal::SessionImpl* const impl, ImplOf(module));
  v1::ParallelizeModuleRequest request;
  request.set_name(module.name());
  request.set_plan_json(plan_json);
  request.set_mesh_dim(mesh_or_dim);
  grpc::ClientContext context;
  impl->Prepare(&context, kTransferTimeout);
  v1::ParallelizeModuleReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl->modules->ParallelizeModule(&context, request, &reply)));
  return ModuleAccess::Adopt(ModuleAccess::SessionOf(module), reply.module());
}

absl::StatusOr<Module> DistributeModule(const Module& module, const std::string& partition_json) {
  ASSIGN_OR_RETURN(internal::SessionImpl* const impl, ImplOf(module));
  v1::DistributeModuleRequest request;
  request.set_name(module.name());
  request.set_partition_json(partition_json);
  grpc::ClientContext context;
  impl->Prepare(&context, kTransferTimeout);
  v1::ParallelizeModuleReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl->modules->DistributeModule(&context, request, &reply)));
  return ModuleAccess::Adopt(ModuleAccess::SessionOf(module), reply.module());
}

absl::StatusOr<Module> GetModule(Session& session, const std::string& name) {
  const internal::SessionImpl& impl = internal_impl(session);
  v1::ShowModuleRequest request;
  request.set_name(name);
  grpc::ClientContext context;
  impl.Prepare(&context);
  v1::ModuleInfo info;
  RETURN_IF_ERROR(FromGrpcStatus(impl.modules->ShowModule(&context, request, &info)));
  return ModuleAccess::Adopt(session.shared_from_this(), info);
}

absl::StatusOr<std::vector<ModuleInfo>> ListModules(Session& session) {
  const internal::SessionImpl& impl = internal_impl(session);
  grpc::ClientContext context;
  impl.Prepare(&context);
  v1::ListModulesReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl.modules->ListModules(&context, {}, &reply)));
  std::vector<ModuleInfo> modules;
  for (const v1::ModuleInfo& m : reply.modules()) {
    ASSIGN_OR_RETURN(ModuleInfo info, FromWire(m));
    modules.push_back(std::move(info));
  }
  return modules;
}

absl::Status RemoveModule(Session& session, const std::string& name) {
  const internal::SessionImpl& impl = internal_impl(session);
  v1::RemoveModuleRequest request;
  request.set_name(name);
  grpc::ClientContext context;
  impl.Prepare(&context);
  v1::RemoveModuleReply reply;
  return FromGrpcStatus(impl.modules->RemoveModule(&context, request, &reply));
}

absl::Status Unpublish(Session& session, const std::string& model, const std::string& version) {
  const internal::SessionImpl& impl = internal_impl(session);
  v1::UnpublishModuleRequest request;
  request.set_model(model);
  request.set_version(version);
  grpc::ClientContext context;
  impl.Prepare(&context);
  v1::UnpublishModuleReply reply;
  return FromGrpcStatus(impl.modules->UnpublishModule(&context, request, &reply));
}

absl::StatusOr<ModuleOutput> Module::Forward(const HostTensor& input, Outputs outputs) const {
  return RunForward(*this, &input, {}, outputs);
}

absl::StatusOr<ModuleOutput> Module::ForwardLocal(std::span<const HostTensor> locals,
                                                  Outputs outputs) const {
  return RunForward(*this, nullptr, locals, outputs);
}

absl::StatusOr<std::vector<HostTensor>> Module::ForwardMany(
    std::span<const HostTensor> inputs) const {
  ASSIGN_OR_RETURN(internal::SessionImpl* const impl, ImplOf(*this));
  if (inputs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("module '", name(), "': a forward needs inputs"));
  }
  v1::ForwardRequest request;
  request.set_name(name());
  for (size_t k = 0; k < inputs.size(); ++k) {
    v1::ModuleInput* in = k == 0 ? request.mutable_input() : request.add_more_inputs();
    *in->mutable_full() = ToProto(inputs[k]);
  }
  grpc::ClientContext context;
  impl->Prepare(&context, kTransferTimeout);
  v1::ForwardReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl->modules->Forward(&context, request, &reply)));
  std::vector<HostTensor> outputs;
  for (int o = 0; o <= reply.more_outputs_size(); ++o) {
    absl::StatusOr<HostTensor> t = FromProto(o == 0 ? reply.output() : reply.more_outputs(o - 1));
    if (!t.ok()) return WithContext(absl::StrCat("output ", o), t.status());
    outputs.push_back(*std::move(t));
  }
  return outputs;
}

absl::StatusOr<StepResult> Module::Step(const HostTensor& input, const StepOptions& options) const {
  ASSIGN_OR_RETURN(internal::SessionImpl* const impl, ImplOf(*this));
  v1::StepRequest request;
  request.set_name(name());
  InputToWire({}, &input, request.mutable_input());
  if (options.grad_output.has_value()) {
    *request.mutable_grad_output() = ToProto(*options.grad_output);
  } else {
    request.set_loss("sum");
  }
  if (options.sgd.has_value()) *request.mutable_sgd() = ToWire(*options.sgd);
  request.set_outputs(ToWire(options.outputs));
  grpc::ClientContext context;
  impl->Prepare(&context, kTransferTimeout);
  v1::StepReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl->modules->Step(&context, request, &reply)));
  StepResult result;
  ASSIGN_OR_RETURN(result.output, FromWire(reply.forward()));
  for (const v1::ModuleParameter& g : reply.gradients()) {
    ASSIGN_OR_RETURN(ModuleParameter parameter, FromWire(g));
    result.gradients.push_back(std::move(parameter));
  }
  return result;
}

absl::StatusOr<std::vector<std::pair<std::string, HostTensor>>> Module::StateDict(
    bool gradients) const {
  ASSIGN_OR_RETURN(internal::SessionImpl* const impl, ImplOf(*this));
  v1::SaveModuleRequest request;
  request.set_name(name());
  request.set_gradients(gradients);
  grpc::ClientContext context;
  impl->Prepare(&context, kTransferTimeout);
  auto reader = impl->modules->SaveModule(&context, request);
  std::vector<std::pair<std::string, HostTensor>> tensors;
  std::optional<TensorAssembler> tensor;
  std::string current;
  // A tensor is complete when the next one starts, or the stream ends.
  auto finish = [&]() -> absl::Status {
    if (!tensor.has_value()) return absl::OkStatus();
    ASSIGN_OR_RETURN(HostTensor t, std::move(*tensor).Finish());
    tensors.emplace_back(std::move(current), std::move(t));
    tensor.reset();
    return absl::OkStatus();
  };
  v1::SaveModuleChunk chunk;
  absl::Status status;
  while (status.ok() && reader->Read(&chunk)) {
    if (!chunk.name().empty()) {
      status = finish();
      if (!status.ok()) break;
      current = chunk.name();
      tensor.emplace(absl::StrCat("parameter '", current, "' of module '", name(), "'"),
                     absl::StatusCode::kDataLoss);
      absl::StatusOr<DType> dtype = FromProto(chunk.data().dtype());
      absl::StatusOr<Shape> shape = dtype.ok() ? FromProto(chunk.data().shape()) : dtype.status();
      status = shape.ok() ? tensor->Start(*dtype, *shape) : shape.status();
    } else if (!tensor.has_value()) {
      status = absl::DataLossError("the state_dict stream began without a tensor's name");
    }
    if (status.ok()) status = tensor->Append(chunk.data().data());
  }
  if (!status.ok()) {
    context.TryCancel();
    reader->Finish().IgnoreError();
    return status;
  }
  RETURN_IF_ERROR(FromGrpcStatus(reader->Finish()));
  RETURN_IF_ERROR(finish());
  return tensors;
}

absl::Status Module::Save(const std::string& path, bool gradients) const {
  ASSIGN_OR_RETURN(auto tensors, StateDict(gradients));
  SafetensorsFile file;
  for (auto& [name, tensor] : tensors) file.tensors.emplace(std::move(name), std::move(tensor));
  return WriteSafetensorsFile(path, file);
}

absl::StatusOr<SaveInfo> Module::SaveCheckpoint(const std::string& path, bool gradients) const {
  ASSIGN_OR_RETURN(internal::SessionImpl* const impl, ImplOf(*this));
  v1::SaveModuleCheckpointRequest request;
  request.set_name(name());
  request.set_path(path);
  request.set_gradients(gradients);
  grpc::ClientContext context;
  impl->Prepare(&context, kTransferTimeout);
  v1::SaveTensorReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl->modules->SaveModuleCheckpoint(&context, request, &reply)));
  return SaveInfo{reply.path(), reply.data_dir(), reply.files(), reply.saved_layout()};
}

absl::StatusOr<PublishedVersion> Module::Publish(const PublishOptions& options) const {
  ASSIGN_OR_RETURN(internal::SessionImpl* const impl, ImplOf(*this));
  v1::PublishModuleRequest request;
  request.set_name(name());
  request.set_model(options.model);
  request.set_version(options.version);
  request.set_max_batch_size(options.max_batch_size);
  request.set_max_queue_delay_us(absl::ToInt64Microseconds(options.max_queue_delay));
  grpc::ClientContext context;
  impl->Prepare(&context);
  v1::PublishModuleReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl->modules->PublishModule(&context, request, &reply)));
  return FromWire(reply.published());
}

absl::StatusOr<ModuleInfo> Module::Show() const {
  ASSIGN_OR_RETURN(internal::SessionImpl* const impl, ImplOf(*this));
  v1::ShowModuleRequest request;
  request.set_name(name());
  grpc::ClientContext context;
  impl->Prepare(&context);
  v1::ModuleInfo info;
  RETURN_IF_ERROR(FromGrpcStatus(impl->modules->ShowModule(&context, request, &info)));
  return FromWire(info);
}

absl::StatusOr<std::string> Module::ExportPlan() const {
  ASSIGN_OR_RETURN(internal::SessionImpl* const impl, ImplOf(*this));
  v1::ExportPlanRequest request;
  request.set_name(name());
  grpc::ClientContext context;
  impl->Prepare(&context);
  v1::ExportPlanReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl->modules->ExportPlan(&context, request, &reply)));
  return reply.plan_json();
}

absl::Status Module::Remove() const {
  const std::shared_ptr<Session>& session = ModuleAccess::SessionOf(*this);
  if (session == nullptr) return absl::FailedPreconditionError("empty Module handle");
  return RemoveModule(*session, name());
}

}  // namespace tessera::client
