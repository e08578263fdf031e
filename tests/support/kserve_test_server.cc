// kserve_test_server: the KServe v2 inference service over the test models
// (tests/support/served_test_models.h) on loopback, for client tests in other languages
// (tests/python/test_kserve_tritonclient.py). Prints "listening on port N" and serves until
// killed. Usage: kserve_test_server [host:port] (default 127.0.0.1:0, any free port).

#include <iostream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/inference_service.h"
#include "server/tables/served_models.h"
#include "tests/support/served_test_models.h"

int main(int argc, char** argv) {
  using tessera::testing::AffineModel;
  using tessera::testing::AffineRunner;
  const std::string listen = argc > 1 ? argv[1] : "127.0.0.1:0";
  tessera::ServedModels models;
  for (absl::Status s : {
           models.Publish(AffineModel("affine", "2", std::make_shared<AffineRunner>(1.0f))),
           models.Publish(AffineModel("affine", "10", std::make_shared<AffineRunner>(2.0f))),
           models.Publish(AffineModel("batched", "1", std::make_shared<AffineRunner>(1.0f),
                                      {4, absl::Milliseconds(100)})),
           models.Publish(tessera::testing::TwicePlusOneBf16Model()),
           models.Publish(tessera::testing::IdsModel()),
       }) {
    if (!s.ok()) {
      std::cerr << s << std::endl;
      return 1;
    }
  }
  tessera::InferenceService service(&models);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "cannot listen on " << listen << std::endl;
    return 1;
  }
  std::cout << "listening on port " << port << std::endl;
  server->Wait();
  return 0;
}
