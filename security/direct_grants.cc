#include "security/direct_grants.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "security/constant_time.h"

namespace tessera {
namespace {

// The signed text of a grant under `purpose`: every field but mac, each length-delimited by its
// position so that no two grants share a text.
std::string GrantText(absl::string_view purpose, const v1::DirectGrant& g) {
  return absl::StrCat(purpose, "\n", g.worker_id(), "\n", g.incarnation(), "\n", g.sequence(), "\n",
                      g.tensor().size(), ":", g.tensor(), "\n", static_cast<int>(g.dtype()), "\n",
                      absl::StrJoin(g.shape().dims(), ","), "\n", g.expires_unix_ms(), "\n",
                      g.read() ? "read" : "write");
}

std::string Hmac(const std::string& key, const std::string& text) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(text.data()), text.size(), out, &length);
  return std::string(reinterpret_cast<const char*>(out), length);
}

}  // namespace

std::string NewGrantKey() {
  std::string key(32, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(key.size())) != 1) {
    std::abort();  // no randomness: no key can be trusted
  }
  return key;
}

void SignGrant(const std::string& key, v1::DirectGrant& grant) {
  grant.set_mac(Hmac(key, GrantText("tessera-grant-v1", grant)));
}

absl::Status CheckGrant(const std::string& key, const v1::DirectGrant& grant, int64_t worker_id,
                        int64_t incarnation, absl::Time now) {
  if (key.empty()) {
    return absl::PermissionDeniedError("this worker has no grant key: it takes no direct uploads");
  }
  if (!ConstantTimeEqual(grant.mac(), Hmac(key, GrantText("tessera-grant-v1", grant)))) {
    return absl::PermissionDeniedError(
        "the upload's grant does not check out (forged, altered, or for another worker)");
  }
  if (grant.worker_id() != worker_id || grant.incarnation() != incarnation) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the grant is for worker ", grant.worker_id(), " incarnation ", grant.incarnation(),
        ", not worker ", worker_id, " incarnation ", incarnation));
  }
  if (absl::FromUnixMillis(grant.expires_unix_ms()) <= now) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the grant for sequence ", grant.sequence(), " expired ",
        absl::FormatDuration(now - absl::FromUnixMillis(grant.expires_unix_ms())), " ago"));
  }
  return absl::OkStatus();
}

std::string GrantReceipt(const std::string& key, const v1::DirectGrant& grant) {
  return Hmac(key, GrantText("tessera-receipt-v1", grant));
}

bool CheckReceipt(const std::string& key, const v1::DirectGrant& grant,
                  const std::string& receipt) {
  return !key.empty() && ConstantTimeEqual(receipt, GrantReceipt(key, grant));
}

}  // namespace tessera
