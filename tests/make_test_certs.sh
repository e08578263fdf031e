#!/bin/sh
# Writes throwaway certificates for the security tests into DIR (P-256 keys, valid one day):
# ca.pem (the cluster's CA) and other-ca.pem (an unrelated one); signed by ca: coordinator.pem
# (CN tessera-coordinator), worker.pem (CN tessera-worker), client.pem (CN alice); signed by
# other-ca: rogue.pem (CN tessera-coordinator). Each X.pem has its key in X.key; server
# certificates carry the SANs IP:127.0.0.1 and DNS:localhost.
set -eu
dir=$1
mkdir -p "$dir"
cd "$dir"
ca() {  # name, common name
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -keyout "$1.key" -out "$1.pem" -subj "/CN=$2" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    2>/dev/null
}
leaf() {  # name, common name, signing CA, subjectAltName
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days 1 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca "tessera test CA"
ca other-ca "another CA"
leaf coordinator tessera-coordinator ca "IP:127.0.0.1,DNS:localhost,DNS:tessera-coordinator"
leaf worker tessera-worker ca "IP:127.0.0.1,DNS:localhost,DNS:tessera-worker"
leaf client alice ca "DNS:alice"
leaf rogue tessera-coordinator other-ca "IP:127.0.0.1,DNS:localhost,DNS:tessera-coordinator"
