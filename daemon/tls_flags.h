#ifndef TESSERA_DAEMON_TLS_FLAGS_H_
#define TESSERA_DAEMON_TLS_FLAGS_H_

#include "CLI/CLI.hpp"
#include "proto/tls_files.h"

namespace tessera::daemon {

// Adds --tls_cert, --tls_key and --tls_ca ($TESSERA_TLS_CERT, $TESSERA_TLS_KEY, $TESSERA_TLS_CA):
// the PEM files this daemon serves and dials with (tessera::TlsFiles).
void AddTlsFlags(CLI::App& app, TlsFiles* files);

}  // namespace tessera::daemon

#endif  // TESSERA_DAEMON_TLS_FLAGS_H_
