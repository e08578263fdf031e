#include "security/tls_flags.h"

#include "absl/strings/str_cat.h"

namespace tessera::daemon {

void AddTlsFlags(CLI::App& app, TlsFiles* files) {
  app.add_option("--tls_cert", files->cert_file,
                 "PEM certificate chain this daemon serves with and presents to the daemons it "
                 "dials; with --tls_key, every listener and link uses TLS")
      ->envname("TESSERA_TLS_CERT");
  app.add_option("--tls_key", files->key_file, "PEM private key of --tls_cert")
      ->envname("TESSERA_TLS_KEY");
  app.add_option("--tls_ca", files->ca_file,
                 "PEM CA certificate(s) that sign the peers' certificates: callers must present a "
                 "certificate it signs (mutual TLS), and dialed daemons are verified against it")
      ->envname("TESSERA_TLS_CA");
}

absl::StatusOr<DaemonCredentials> MakeDaemonCredentials(const TlsFiles& tls,
                                                        const std::string& secret,
                                                        const std::string& peer_identity,
                                                        absl::string_view identity_flag) {
  if (!peer_identity.empty() && tls.ca_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", identity_flag, " needs mutual TLS (--tls_cert, --tls_key and --tls_ca)"));
  }
  if (secret.empty() && peer_identity.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a shared secret is required (--secret or $TESSERA_SECRET), or mutual TLS "
                     "with --",
                     identity_flag));
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server = ServerCredentialsFor(tls);
  if (!server.ok()) return server.status();
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> channel = ChannelCredentialsFor(tls);
  if (!channel.ok()) return channel.status();
  return DaemonCredentials{*std::move(server), *std::move(channel)};
}

}  // namespace tessera::daemon
