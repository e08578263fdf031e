#ifndef TESSERA_SECURITY_TLS_FLAGS_H_
#define TESSERA_SECURITY_TLS_FLAGS_H_

#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "proto/tls_files.h"

namespace tessera::daemon {

// Adds --tls_cert, --tls_key and --tls_ca ($TESSERA_TLS_CERT, $TESSERA_TLS_KEY, $TESSERA_TLS_CA):
// the PEM files this daemon serves and dials with (tessera::TlsFiles).
void AddTlsFlags(CLI::App& app, TlsFiles* files);

// What a daemon serves its listener with and dials its peer daemon with.
struct DaemonCredentials {
  std::shared_ptr<grpc::ServerCredentials> server;
  std::shared_ptr<grpc::ChannelCredentials> channel;
};

// Checks how a daemon knows its peer daemon, then makes its credentials from `tls`: by the
// certificate name `peer_identity` (the flag `identity_flag`), which needs mutual TLS, or else by
// the shared `secret`, which is then required. INVALID_ARGUMENT saying which flag is missing.
absl::StatusOr<DaemonCredentials> MakeDaemonCredentials(const TlsFiles& tls,
                                                        const std::string& secret,
                                                        const std::string& peer_identity,
                                                        absl::string_view identity_flag);

}  // namespace tessera::daemon

#endif  // TESSERA_SECURITY_TLS_FLAGS_H_
