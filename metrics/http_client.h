// An HTTP GET client (civetweb's), for reading /metrics and Prometheus's HTTP API.
#ifndef TESSERA_METRICS_HTTP_CLIENT_H_
#define TESSERA_METRICS_HTTP_CLIENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera::metrics {

// What a server answered: its status code, Content-Type and body.
struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::string body;
};

// GET `url` (http://HOST:PORT/PATH?QUERY; no TLS), waiting at most `timeout` for the response.
// UNAVAILABLE when it cannot connect or no response comes in time; INVALID_ARGUMENT for a URL of
// another form.
absl::StatusOr<HttpResponse> HttpGet(const std::string& url,
                                     absl::Duration timeout = absl::Seconds(10));

}  // namespace tessera::metrics

#endif  // TESSERA_METRICS_HTTP_CLIENT_H_
