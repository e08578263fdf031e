#include "server/inference_service.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "metrics/registry.h"
#include "proto/grpc_status.h"
#include "server/modules/infer_tensors.h"

#ifndef TESSERA_VERSION_STRING
#define TESSERA_VERSION_STRING "unknown"
#endif

namespace tessera {
namespace {

// One input or output in ModelMetadata's form.
void Describe(const ServedTensor& t, inference::ModelMetadataResponse::TensorMetadata* out) {
  out->set_name(t.name);
  out->set_datatype(std::string(KServeDatatype(t.dtype)));
  for (int64_t size : t.shape) out->add_shape(size);
}

// ModelInfer as an absl::Status, by `deadline` (the call's).
absl::Status Infer(const ServedModels& models, const inference::ModelInferRequest& request,
                   absl::Time deadline, inference::ModelInferResponse* response) {
  ASSIGN_OR_RETURN(std::shared_ptr<const ServedModel> model,
                   models.Find(request.model_name(), request.model_version()));
  ASSIGN_OR_RETURN(std::vector<HostTensor> inputs, ReadModelInputs(request, *model));
  ASSIGN_OR_RETURN(const std::vector<int> asked, RequestedOutputs(request, *model));
  ASSIGN_OR_RETURN(const std::vector<HostTensor> outputs,
                   model->runner->RunAll(std::move(inputs), deadline));
  if (outputs.size() != model->outputs.size()) {
    return absl::InternalError(absl::StrCat("model '", model->name, "' gave ", outputs.size(),
                                            " outputs; it has ", model->outputs.size()));
  }
  response->set_model_name(model->name);
  response->set_model_version(model->version);
  response->set_id(request.id());
  for (int o : asked) AppendModelOutput(*model, o, outputs[o], response);
  return absl::OkStatus();
}

}  // namespace

grpc::Status InferenceService::ServerLive(grpc::ServerContext*, const inference::ServerLiveRequest*,
                                          inference::ServerLiveResponse* response) {
  response->set_live(true);
  return grpc::Status::OK;
}

grpc::Status InferenceService::ServerReady(grpc::ServerContext*,
                                           const inference::ServerReadyRequest*,
                                           inference::ServerReadyResponse* response) {
  response->set_ready(true);
  return grpc::Status::OK;
}

grpc::Status InferenceService::ModelReady(grpc::ServerContext*,
                                          const inference::ModelReadyRequest* request,
                                          inference::ModelReadyResponse* response) {
  response->set_ready(models_->Find(request->name(), request->version()).ok());
  return grpc::Status::OK;
}

grpc::Status InferenceService::ServerMetadata(grpc::ServerContext*,
                                              const inference::ServerMetadataRequest*,
                                              inference::ServerMetadataResponse* response) {
  response->set_name("tessera");
  response->set_version(TESSERA_VERSION_STRING);
  return grpc::Status::OK;
}

grpc::Status InferenceService::ModelMetadata(grpc::ServerContext*,
                                             const inference::ModelMetadataRequest* request,
                                             inference::ModelMetadataResponse* response) {
  absl::StatusOr<std::shared_ptr<const ServedModel>> model =
      models_->Find(request->name(), request->version());
  if (!model.ok()) return ToGrpcStatus(model.status());
  response->set_name((*model)->name);
  if (!request->version().empty()) {
    response->add_versions((*model)->version);
  } else {
    for (const auto& m : models_->List()) {
      if (m->name == request->name()) response->add_versions(m->version);
    }
  }
  response->set_platform("tessera");
  for (const ServedTensor& t : (*model)->inputs) Describe(t, response->add_inputs());
  for (const ServedTensor& t : (*model)->outputs) Describe(t, response->add_outputs());
  return grpc::Status::OK;
}

grpc::Status InferenceService::ModelInfer(grpc::ServerContext* context,
                                          const inference::ModelInferRequest* request,
                                          inference::ModelInferResponse* response) {
  absl::Status status;
  absl::StatusOr<RequestBytes::Ticket> admitted =
      bytes_ == nullptr
          ? RequestBytes::Ticket()
          : bytes_->Admit(static_cast<int64_t>(request->ByteSizeLong()), "inference request");
  if (admitted.ok()) {
    status = Infer(*models_, *request, absl::FromChrono(context->deadline()), response);
  } else {
    status = admitted.status();
  }
  // Labelled by model only for a published one, so that made-up names add no series.
  static metrics::Family<metrics::Counter>& requests = metrics::DefaultRegistry().AddCounter(
      "tessera_inference_requests_total", "ModelInfer requests by model and status code",
      {"model", "code"});
  const bool known = models_->Find(request->model_name(), request->model_version()).ok();
  requests.With({known ? request->model_name() : "", absl::StatusCodeToString(status.code())})
      .Increment();
  return ToGrpcStatus(status);
}

}  // namespace tessera
