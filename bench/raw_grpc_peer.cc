// raw_grpc_peer: the raw gRPC server bench/dtensor_bench measures the service against. It serves
// bench/raw_peer.proto on 127.0.0.1 with the coordinator's message limit (64 MiB) and writes the
// port it got to --port_file; it runs until killed.
//
//   raw_grpc_peer --port_file=FILE

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "grpcpp/grpcpp.h"
#include "raw_peer.grpc.pb.h"

ABSL_FLAG(std::string, port_file, "", "Where to write the port the server listens on");

namespace tessera::bench {
namespace {

constexpr int64_t kMessageBytes = int64_t{1} << 20;
constexpr int kMaxMessageBytes = 64 << 20;

// Receives and sends bytes without looking at them.
class RawPeerService final : public RawPeer::Service {
 public:
  RawPeerService() : payload_(kMessageBytes, '\x01') {}

  // Client streaming.
  grpc::Status Sink(grpc::ServerContext*, grpc::ServerReader<Blob>* reader, Ack* ack) override {
    Blob blob;
    int64_t bytes = 0;
    while (reader->Read(&blob)) bytes += static_cast<int64_t>(blob.data().size());
    ack->set_bytes(bytes);
    return grpc::Status::OK;
  }

  // Server streaming.
  grpc::Status Source(grpc::ServerContext*, const Size* size,
                      grpc::ServerWriter<Blob>* writer) override {
    Blob blob;
    for (int64_t sent = 0; sent < size->bytes();) {
      const int64_t n = std::min(kMessageBytes, size->bytes() - sent);
      blob.set_data(payload_.data(), static_cast<size_t>(n));
      if (!writer->Write(blob)) return grpc::Status(grpc::StatusCode::CANCELLED, "client left");
      sent += n;
    }
    return grpc::Status::OK;
  }

  // Unary.
  grpc::Status Ping(grpc::ServerContext*, const Blob* in, Blob* out) override {
    *out = *in;
    return grpc::Status::OK;
  }

 private:
  const std::string payload_;
};

int Main() {
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (port_file.empty()) {
    std::fprintf(stderr, "raw_grpc_peer: need --port_file\n");
    return 2;
  }
  RawPeerService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "raw_grpc_peer: cannot listen on 127.0.0.1\n");
    return 1;
  }
  {
    const std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << port << "\n";
    std::rename(tmp.c_str(), port_file.c_str());
  }
  server->Wait();
  return 0;
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tessera::bench::Main();
}
