#ifndef TESSERA_SECURITY_CLIENT_TOKENS_H_
#define TESSERA_SECURITY_CLIENT_TOKENS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "security/auth_failures.h"

namespace tessera {

// The bearer tokens a coordinator accepts from clients: a file of lines "NAME TOKEN" (a client's
// name and its token, separated by blanks); blank lines and lines starting with '#' are skipped.
class ClientTokens {
 public:
  // INVALID_ARGUMENT naming the file and line for an unreadable file, a line without exactly two
  // fields, a token shorter than 16 characters or used twice, or a file with no token.
  static absl::StatusOr<ClientTokens> Load(const std::string& path);

  // The name of the client `token` belongs to; nullopt when it is no accepted token. Compares in
  // time independent of where tokens differ.
  std::optional<std::string> Find(absl::string_view token) const;
  size_t size() const { return names_.size(); }

 private:
  std::vector<std::pair<std::string, std::string>> names_;  // (token, name)
};

// The auth context property under which an authenticated client's name is kept.
inline constexpr char kClientNameProperty[] = "tessera_client_name";

// Checks every call on a TLS listener for "authorization: Bearer <token>" with a token of
// `tokens`, except the health service and the worker-facing Registry (which checks workers
// itself). A call without one is refused with UNAUTHENTICATED (the message never repeats the
// token), logged, and counted in `failures` by the caller's certificate name, or by its
// connection for a caller without a certificate (a caller past its failures is answered
// RESOURCE_EXHAUSTED); a valid token is always accepted, whatever failed before it.
class BearerTokenProcessor : public grpc::AuthMetadataProcessor {
 public:
  BearerTokenProcessor(ClientTokens tokens, AuthFailures* failures)
      : tokens_(std::move(tokens)), failures_(failures) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  // What failures of the caller of `context` (a connection's auth context) are counted under:
  // its certificate name, or "connection N (no client certificate)", numbering the connection in
  // its context on its first call.
  std::string FailureKey(grpc::AuthContext& context);

  const ClientTokens tokens_;
  AuthFailures* failures_;
  absl::Mutex mu_;
  int64_t connections_ ABSL_GUARDED_BY(mu_) = 0;  // connections numbered so far
};

}  // namespace tessera

#endif  // TESSERA_SECURITY_CLIENT_TOKENS_H_
