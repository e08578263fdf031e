#include "daemon/tls_flags.h"

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

}  // namespace tessera::daemon
