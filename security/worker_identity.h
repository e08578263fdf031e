#ifndef TESSERA_SECURITY_WORKER_IDENTITY_H_
#define TESSERA_SECURITY_WORKER_IDENTITY_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tessera {

// The first of a verified certificate's `names` (common name and subject alternative names) that
// `accepted` admits: a name equal to an entry, or, for an entry ending in '*' ("tessera-worker-*"),
// a name starting with the text before the '*'. nullopt when none is admitted.
std::optional<std::string> AcceptedIdentity(const std::vector<std::string>& names,
                                            const std::vector<std::string>& accepted);

// The host of a "host:port" or "[v6 host]:port" address ("" when it has no port).
std::string AddressHost(absl::string_view address);

// Whether a certificate with `names` may serve at `host`: one of them is `host` (compared without
// case), or is a wildcard "*.rest" and `host` is one label followed by ".rest".
bool NamesCoverHost(const std::vector<std::string>& names, absl::string_view host);

}  // namespace tessera

#endif  // TESSERA_SECURITY_WORKER_IDENTITY_H_
