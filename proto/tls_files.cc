#include "proto/tls_files.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/client_interceptor.h"

namespace tessera {
namespace {

// The contents of `path`, or "" when `path` is "".
absl::StatusOr<std::string> ReadPem(const std::string& what, const std::string& path) {
  if (path.empty()) return std::string();
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in || text.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the TLS ", what, " file '", path, "'"));
  }
  return text.str();
}

absl::Status CheckPair(const TlsFiles& files) {
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS needs a certificate and its key together; got certificate '",
                     files.cert_file, "' and key '", files.key_file, "'"));
  }
  return absl::OkStatus();
}

// Adds fixed metadata to every call.
class MetadataInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit MetadataInterceptor(const std::vector<std::pair<std::string, std::string>>* metadata)
      : metadata_(metadata) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      std::multimap<std::string, std::string>* sent = methods->GetSendInitialMetadata();
      for (const auto& [key, value] : *metadata_) sent->emplace(key, value);
    }
    methods->Proceed();
  }

 private:
  const std::vector<std::pair<std::string, std::string>>* metadata_;
};

class MetadataInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit MetadataInterceptorFactory(std::vector<std::pair<std::string, std::string>> metadata)
      : metadata_(std::move(metadata)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new MetadataInterceptor(&metadata_);
  }

 private:
  const std::vector<std::pair<std::string, std::string>> metadata_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsFiles& files) {
  if (!files.enabled()) return grpc::InsecureServerCredentials();
  if (absl::Status s = CheckPair(files); !s.ok()) return s;
  if (files.cert_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a TLS listener needs a certificate and key, not only the CA '", files.ca_file, "'"));
  }
  absl::StatusOr<std::string> cert = ReadPem("certificate", files.cert_file);
  absl::StatusOr<std::string> key = ReadPem("key", files.key_file);
  absl::StatusOr<std::string> ca = ReadPem("CA", files.ca_file);
  for (const auto* s : {&cert, &key, &ca}) {
    if (!s->ok()) return s->status();
  }
  grpc::SslServerCredentialsOptions options(
      ca->empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                  : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = *ca;
  options.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const TlsFiles& files) {
  if (!files.enabled()) return grpc::InsecureChannelCredentials();
  if (absl::Status s = CheckPair(files); !s.ok()) return s;
  absl::StatusOr<std::string> cert = ReadPem("certificate", files.cert_file);
  absl::StatusOr<std::string> key = ReadPem("key", files.key_file);
  absl::StatusOr<std::string> ca = ReadPem("CA", files.ca_file);
  for (const auto* s : {&cert, &key, &ca}) {
    if (!s->ok()) return s->status();
  }
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = *ca;
  options.pem_private_key = *key;
  options.pem_cert_chain = *cert;
  return grpc::SslCredentials(options);
}

std::shared_ptr<grpc::Channel> CreateChannelWithMetadata(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const grpc::ChannelArguments& args, std::vector<std::pair<std::string, std::string>> metadata) {
  if (metadata.empty()) return grpc::CreateCustomChannel(address, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<MetadataInterceptorFactory>(std::move(metadata)));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                 std::move(factories));
}

std::vector<std::string> PeerIdentities(const grpc::AuthContext& context) {
  std::vector<std::string> names;
  if (!context.IsPeerAuthenticated()) return names;
  for (const char* property : {GRPC_X509_CN_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME}) {
    for (const grpc::string_ref& value : context.FindPropertyValues(property)) {
      names.emplace_back(value.data(), value.size());
    }
  }
  return names;
}

bool PeerIs(const grpc::AuthContext& context, const std::string& expected) {
  for (const std::string& name : PeerIdentities(context)) {
    if (name == expected) return true;
  }
  return false;
}

}  // namespace tessera
