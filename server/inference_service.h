#ifndef TESSERA_SERVER_INFERENCE_SERVICE_H_
#define TESSERA_SERVER_INFERENCE_SERVICE_H_

#include "grpcpp/grpcpp.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "security/request_bytes.h"
#include "server/tables/served_models.h"

namespace tessera {

// The KServe v2 / Open Inference Protocol service (inference.GRPCInferenceService) over the
// published models, so KServe's and Triton's clients call Tessera unchanged. Metadata calls answer
// from `models`; ModelInfer reads the request's one input (server/infer_tensors.h), runs the
// model's runner (through its dynamic batcher when batching is on) and answers its output as raw
// contents.
class InferenceService final : public inference::GRPCInferenceService::Service {
 public:
  explicit InferenceService(ServedModels* models) : models_(models) {}

  // Inference requests are admitted to `bytes` (bytes of requests in flight) before they are
  // decoded; set before serving. None: all are.
  void LimitRequestBytes(RequestBytes* bytes) { bytes_ = bytes; }

  // Unary. Always live.
  grpc::Status ServerLive(grpc::ServerContext*, const inference::ServerLiveRequest*,
                          inference::ServerLiveResponse* response) override;
  // Unary. Always ready: models come and go, each with its own ModelReady.
  grpc::Status ServerReady(grpc::ServerContext*, const inference::ServerReadyRequest*,
                           inference::ServerReadyResponse* response) override;
  // Unary. Ready iff the model (version) is published; an unknown one is not ready, not an error.
  grpc::Status ModelReady(grpc::ServerContext*, const inference::ModelReadyRequest* request,
                          inference::ModelReadyResponse* response) override;
  // Unary. Name "tessera", the project's version, no protocol extensions.
  grpc::Status ServerMetadata(grpc::ServerContext*, const inference::ServerMetadataRequest*,
                              inference::ServerMetadataResponse* response) override;
  // Unary. NOT_FOUND for an unknown model or version. Versions: every published one, or the one
  // asked for; inputs and outputs of the version asked for (the highest by default).
  grpc::Status ModelMetadata(grpc::ServerContext*, const inference::ModelMetadataRequest* request,
                             inference::ModelMetadataResponse* response) override;
  // Unary. NOT_FOUND for an unknown model or version; INVALID_ARGUMENT naming what is wrong with
  // the input or the requested outputs, checked before anything runs; the runner's status when it
  // fails.
  grpc::Status ModelInfer(grpc::ServerContext*, const inference::ModelInferRequest* request,
                          inference::ModelInferResponse* response) override;

 private:
  ServedModels* models_;
  RequestBytes* bytes_ = nullptr;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_INFERENCE_SERVICE_H_
