#include "security/client_tokens.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpc/grpc_security_constants.h"
#include "security/constant_time.h"

namespace tessera {
namespace {

// Methods served without a token: health checks, and the Registry (workers authenticate there).
bool OpenMethod(absl::string_view path) {
  return absl::StartsWith(path, "/grpc.health.v1.Health/") ||
         absl::StartsWith(path, "/tessera.v1.Registry/");
}

// The first name in the caller's certificate, or "" for a caller without one.
std::string CertificateName(const grpc::AuthContext& context) {
  for (const char* property : {GRPC_X509_CN_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME}) {
    for (const grpc::string_ref& value : context.FindPropertyValues(property)) {
      return std::string(value.data(), value.size());
    }
  }
  return "";
}

// The auth context property that numbers a connection without a client certificate.
constexpr char kConnectionProperty[] = "tessera_connection";

// Whether `context` holds `property` with `value`.
bool HasProperty(const grpc::AuthContext& context, const char* property, absl::string_view value) {
  for (const grpc::string_ref& v : context.FindPropertyValues(property)) {
    if (absl::string_view(v.data(), v.size()) == value) return true;
  }
  return false;
}

}  // namespace

std::string BearerTokenProcessor::FailureKey(grpc::AuthContext& context) {
  const std::string name = CertificateName(context);
  if (!name.empty()) return name;
  absl::MutexLock lock(&mu_);
  for (const grpc::string_ref& v : context.FindPropertyValues(kConnectionProperty)) {
    return absl::StrCat("connection ", absl::string_view(v.data(), v.size()),
                        " (no client certificate)");
  }
  const std::string number = absl::StrCat(++connections_);
  context.AddProperty(kConnectionProperty, number);
  return absl::StrCat("connection ", number, " (no client certificate)");
}

absl::StatusOr<ClientTokens> ClientTokens::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read tokens file '", path, "'"));
  ClientTokens tokens;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text.front() == '#') continue;
    const std::vector<std::string> fields =
        absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const std::string where = absl::StrCat("tokens file '", path, "' line ", number);
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " has ", fields.size(), " fields; want 'NAME TOKEN'"));
    }
    if (fields[1].size() < 16) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the token of '", fields[0], "' is shorter than 16 characters"));
    }
    if (tokens.Find(fields[1]).has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the token of '", fields[0], "' is used by another client too"));
    }
    tokens.names_.emplace_back(fields[1], fields[0]);
  }
  if (tokens.names_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tokens file '", path, "' holds no token"));
  }
  return tokens;
}

std::optional<std::string> ClientTokens::Find(absl::string_view token) const {
  std::optional<std::string> found;
  for (const auto& [t, name] : names_) {
    if (ConstantTimeEqual(t, token)) found = name;
  }
  return found;
}

grpc::Status BearerTokenProcessor::Process(const InputMetadata& auth_metadata,
                                           grpc::AuthContext* context,
                                           OutputMetadata* consumed_auth_metadata,
                                           OutputMetadata*) {
  std::string method;
  if (auto it = auth_metadata.find(":path"); it != auth_metadata.end()) {
    method.assign(it->second.data(), it->second.size());
  }
  if (OpenMethod(method)) return grpc::Status::OK;
  std::string reason;
  auto it = auth_metadata.find("authorization");
  if (it == auth_metadata.end()) {
    reason =
        "this coordinator needs a bearer token: send 'authorization: Bearer <token>' "
        "(tessera --token or $TESSERA_TOKEN)";
  } else {
    const absl::string_view value(it->second.data(), it->second.size());
    std::optional<std::string> name;
    if (absl::StartsWith(value, "Bearer ")) name = tokens_.Find(value.substr(7));
    if (name.has_value()) {
      // The context is the connection's: name its client once, not once per call.
      if (!HasProperty(*context, kClientNameProperty, *name)) {
        context->AddProperty(kClientNameProperty, *name);
      }
      consumed_auth_metadata->emplace("authorization", std::string(value));
      return grpc::Status::OK;
    }
    reason = "the bearer token sent is not one this coordinator accepts";
  }
  // gRPC's token hook is given the connection's auth context but not the peer's address: a
  // caller is counted by its certificate name, or else by its connection.
  const absl::Status refused =
      failures_->Refuse(FailureKey(*context), method, absl::UnauthenticatedError(reason));
  return grpc::Status(static_cast<grpc::StatusCode>(refused.code()),
                      std::string(refused.message()));
}

}  // namespace tessera
