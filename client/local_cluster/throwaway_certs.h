#ifndef TESSERA_CLIENT_LOCAL_CLUSTER_THROWAWAY_CERTS_H_
#define TESSERA_CLIENT_LOCAL_CLUSTER_THROWAWAY_CERTS_H_

#include <string>

#include "absl/status/status.h"

namespace tessera {

// Writes a throwaway certificate set into `dir` with the openssl command (P-256 keys, valid one
// day): ca.pem (a CA) and other-ca.pem (an unrelated one); signed by ca: coordinator.pem (CN
// tessera-coordinator), worker.pem (CN tessera-worker), worker-0.pem and worker-1.pem (workers'
// own identities, CN tessera-worker-0 and -1), worker-far.pem (CN tessera-worker-far, SAN only
// DNS:far.example), client.pem (CN alice); signed by other-ca: rogue.pem (CN
// tessera-coordinator). Each X.pem has its key in X.key; the coordinator's, workers' (but
// worker-far's) and rogue certificates carry the SANs IP:127.0.0.1 and DNS:localhost. For `tessera
// up --tls`, tests and benchmarks on loopback. FAILED_PRECONDITION when openssl fails or is
// missing.
absl::Status MakeThrowawayCertificates(const std::string& dir);

}  // namespace tessera

#endif  // TESSERA_CLIENT_LOCAL_CLUSTER_THROWAWAY_CERTS_H_
