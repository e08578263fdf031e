#ifndef TESSERA_PROTO_TLS_FILES_H_
#define TESSERA_PROTO_TLS_FILES_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace tessera {

// The PEM files of one end of a TLS link; all empty: plaintext.
struct TlsFiles {
  std::string cert_file;  // This end's certificate chain.
  std::string key_file;   // Its private key.
  std::string ca_file;    // The CA that signs the other end's certificate.

  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !ca_file.empty(); }
};

// Server credentials for `files`: plaintext when none is set; TLS with cert and key; mutual TLS
// (a client certificate signed by the CA required and verified) when the CA is set too.
// INVALID_ARGUMENT when only one of cert and key is set or a file cannot be read, naming it.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsFiles& files);

// Channel credentials for `files`: plaintext when none is set; TLS verifying the server against
// the CA (the system's roots when empty), presenting cert and key as this end's certificate when
// set. INVALID_ARGUMENT as ServerCredentialsFor.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const TlsFiles& files);

// A channel to `address` that adds `metadata` (key, value) to every call made on it.
std::shared_ptr<grpc::Channel> CreateChannelWithMetadata(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const grpc::ChannelArguments& args, std::vector<std::pair<std::string, std::string>> metadata);

// The names a verified peer certificate carries: its common name and subject alternative names.
// Empty for a plaintext peer or one that presented no certificate.
std::vector<std::string> PeerIdentities(const grpc::AuthContext& context);

// True when one of `context`'s PeerIdentities is `expected`.
bool PeerIs(const grpc::AuthContext& context, const std::string& expected);

}  // namespace tessera

#endif  // TESSERA_PROTO_TLS_FILES_H_
