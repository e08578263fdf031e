#include "client/local_cluster/throwaway_certs.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

// The shell commands that write the set (tests/cluster/cluster_security_test.cc relies on its
// names).
constexpr char kScript[] = R"(set -eu
ca() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -keyout "$1.key" -out "$1.pem" -subj "/CN=$2" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}
leaf() {
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$1.key" -out "$1.csr" -subj "/CN=$2"
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days 1 \
    -extfile "$1.ext" -out "$1.pem"
  rm -f "$1.csr" "$1.ext"
}
ca ca "tessera throwaway CA"
ca other-ca "another CA"
leaf coordinator tessera-coordinator ca "IP:127.0.0.1,DNS:localhost,DNS:tessera-coordinator"
leaf worker tessera-worker ca "IP:127.0.0.1,DNS:localhost,DNS:tessera-worker"
leaf worker-0 tessera-worker-0 ca "IP:127.0.0.1,DNS:localhost"
leaf worker-1 tessera-worker-1 ca "IP:127.0.0.1,DNS:localhost"
leaf worker-far tessera-worker-far ca "DNS:far.example"
leaf client alice ca "DNS:alice"
leaf rogue tessera-coordinator other-ca "IP:127.0.0.1,DNS:localhost,DNS:tessera-coordinator"
)";

}  // namespace

absl::Status MakeThrowawayCertificates(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string script = absl::StrCat(dir, "/make-certs.sh");
  {
    FILE* f = std::fopen(script.c_str(), "w");
    if (f == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("cannot write ", script));
    }
    std::fputs(kScript, f);
    std::fclose(f);
  }
  const std::string command = absl::StrCat("cd '", dir, "' && sh make-certs.sh > openssl.log 2>&1");
  if (std::system(command.c_str()) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("openssl could not make the certificates in ",
                                                      dir, " (is openssl installed? see ", dir,
                                                      "/openssl.log)"));
  }
  return absl::OkStatus();
}

}  // namespace tessera
