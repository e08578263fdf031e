#include "metrics/http_client.h"

#include <civetweb.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "metrics/civetweb_library.h"

namespace tessera::metrics {
namespace {

struct CloseConnection {
  void operator()(mg_connection* c) const { mg_close_connection(c); }
};

}  // namespace

absl::StatusOr<HttpResponse> HttpGet(const std::string& url, absl::Duration timeout) {
  constexpr absl::string_view kScheme = "http://";
  absl::string_view rest(url);
  if (!absl::ConsumePrefix(&rest, kScheme)) {
    return absl::InvalidArgumentError(absl::StrCat("URL '", url, "' does not start with http://"));
  }
  const size_t slash = std::min(rest.find('/'), rest.size());
  const absl::string_view authority = rest.substr(0, slash);
  const std::string target = slash == rest.size() ? "/" : std::string(rest.substr(slash));
  const size_t colon = authority.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(authority.substr(colon + 1), &port) ||
      port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("URL '", url, "' names no port in 1..65535"));
  }
  std::string host(authority.substr(0, colon));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);

  InitCivetweb();
  char why[256] = "";
  std::unique_ptr<mg_connection, CloseConnection> conn(
      mg_connect_client(host.c_str(), port, 0, why, sizeof(why)));
  if (conn == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", url, ": ", why));
  }
  mg_printf(conn.get(), "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", target.c_str(),
            std::string(authority).c_str());
  const int64_t ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout));
  if (mg_get_response(conn.get(), why, sizeof(why),
                      static_cast<int>(std::min<int64_t>(ms, INT32_MAX))) < 0) {
    return absl::UnavailableError(absl::StrCat("no response from ", url, ": ", why));
  }
  HttpResponse response;
  const mg_response_info* info = mg_get_response_info(conn.get());
  response.status = info->status_code;
  for (int i = 0; i < info->num_headers; ++i) {
    if (absl::EqualsIgnoreCase(info->http_headers[i].name, "Content-Type")) {
      response.content_type = info->http_headers[i].value;
    }
  }
  char buffer[16384];
  int n;
  while ((n = mg_read(conn.get(), buffer, sizeof(buffer))) > 0) response.body.append(buffer, n);
  return response;
}

}  // namespace tessera::metrics
