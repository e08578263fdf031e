#include "security/worker_identity.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace tessera {

std::optional<std::string> AcceptedIdentity(const std::vector<std::string>& names,
                                            const std::vector<std::string>& accepted) {
  for (const std::string& name : names) {
    for (const std::string& entry : accepted) {
      if (entry.empty()) continue;
      const bool admitted =
          entry.back() == '*'
              ? absl::StartsWith(name, absl::string_view(entry).substr(0, entry.size() - 1))
              : name == entry;
      if (admitted) return name;
    }
  }
  return std::nullopt;
}

std::string AddressHost(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos) return "";
    return std::string(address.substr(1, close - 1));
  }
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return "";
  return std::string(address.substr(0, colon));
}

bool NamesCoverHost(const std::vector<std::string>& names, absl::string_view host) {
  if (host.empty()) return false;
  for (const std::string& name : names) {
    if (absl::EqualsIgnoreCase(name, host)) return true;
    if (absl::StartsWith(name, "*.")) {
      const size_t dot = host.find('.');
      if (dot != absl::string_view::npos && dot > 0 &&
          absl::EqualsIgnoreCase(host.substr(dot), absl::string_view(name).substr(1))) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace tessera
